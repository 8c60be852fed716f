//! The simulated devshard network, black-box over loopback HTTP: the protocol paths, every
//! fault knob, the chain and control APIs and the `sim` command. Time-based tests run on
//! tokio's paused clock, which the simulator shares.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "sim/client.rs"]
mod client;

#[path = "sim/chain.rs"]
mod chain;
#[path = "sim/cli.rs"]
mod cli;
#[path = "sim/control.rs"]
mod control;
#[path = "sim/create.rs"]
mod create;
#[path = "sim/faults.rs"]
mod faults;
#[path = "sim/forged_diffs.rs"]
mod forged_diffs;
#[path = "sim/latency.rs"]
mod latency;
#[path = "sim/protocol.rs"]
mod protocol;
#[path = "sim/rejections.rs"]
mod rejections;
#[path = "sim/settle.rs"]
mod settle;
#[path = "sim/settle_chain.rs"]
mod settle_chain;
#[path = "sim/stragglers.rs"]
mod stragglers;
#[path = "sim/timeouts.rs"]
mod timeouts;
#[path = "sim/warm.rs"]
mod warm;
