//! The settlement actor against the simulated network over real HTTP: finalize rounds, signature
//! collection, the Cosmos tx, and every chain fault knob. Paused time wherever a retry waits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "sim/client.rs"]
mod client;

#[path = "settlement/check.rs"]
mod check;
#[path = "settlement/flow.rs"]
mod flow;
#[path = "settlement/lease.rs"]
mod lease;
#[path = "store/pgdb.rs"]
mod pgdb;
#[path = "settlement/port.rs"]
mod port;
