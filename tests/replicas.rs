//! Several real `devshard-gateway serve` processes on one PostgreSQL database (issue 14): escrow
//! ownership spread over the replicas by fenced leases, failover after `kill -9`, split brain
//! after `SIGSTOP`, and rotation led by one replica while the others run the escrows. The
//! database comes from `tests/store/pgdb.rs` (one fresh schema per test); the network is the
//! simulator.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "process/child.rs"]
mod child;
#[path = "replicas/cluster.rs"]
mod cluster;
#[path = "replicas/failover.rs"]
mod failover;
#[path = "store/pgdb.rs"]
mod pgdb;
#[path = "replicas/retire.rs"]
mod retire;
#[path = "replicas/rotation.rs"]
mod rotation;
#[path = "replicas/split_brain.rs"]
mod split_brain;
