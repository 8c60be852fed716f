//! Process-level tests: the real `devshard-gateway serve` binary against the simulated network
//! (SIGKILL and restart).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "process/allocator.rs"]
mod allocator;
#[path = "process/child.rs"]
mod child;
#[path = "process/crash.rs"]
mod crash;
#[path = "process/create.rs"]
mod create;
#[path = "process/pg_restart.rs"]
mod pg_restart;
#[path = "store/pgdb.rs"]
mod pgdb;
#[path = "process/settle.rs"]
mod settle;
#[path = "process/warm.rs"]
mod warm;
