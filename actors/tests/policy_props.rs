//! Unit and property tests of the pure health policies (docs/health.md §1–§4, invariants 1, 3, 4, 6–9 at
//! the policy level). No runtime: time is an argument, jitter an explicit draw, and every property
//! runs from a fixed proptest seed with a modest case count so the binary finishes in seconds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "policy_props/common.rs"]
mod common;
#[path = "policy_props/correlation.rs"]
mod correlation;
#[path = "policy_props/health.rs"]
mod health;
#[path = "policy_props/hedge.rs"]
mod hedge;
#[path = "policy_props/perf.rs"]
mod perf;
#[path = "policy_props/world.rs"]
mod world;
#[path = "policy_props/world_props.rs"]
mod world_props;
