//! The polite control plane (docs/health.md §7, invariant 10): the `ChainPoller` against the simulated
//! chain (a simulated day on the paused clock), against a scripted public API (429/503 back-off,
//! staleness, live settings) and, `#[ignore]`d, through a real nginx (`tests/nginx/run.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "chain_poll/harness.rs"]
mod harness;
#[path = "chain_poll/upstream.rs"]
mod upstream;

#[path = "chain_poll/backoff.rs"]
mod backoff;
#[path = "chain_poll/day.rs"]
mod day;
#[path = "chain_poll/live.rs"]
mod live;
#[path = "chain_poll/nginx.rs"]
mod nginx;
#[path = "chain_poll/staleness.rs"]
mod staleness;
