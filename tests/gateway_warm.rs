//! The seed incident tests (000 health, 001 hedging, 002 late finish, 004 repair) again, with
//! every simulated host signing with a chain-granted warm key (LIFECYCLE.md §5). Same test code
//! as `tests/gateway.rs`: only the harness's key mode differs. (Seed 003 is chain polling, which
//! no host signature takes part in.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Every host on a warm key.
pub const WARM_KEYS: devshard_gateway::sim::WarmMode = devshard_gateway::sim::WarmMode::All;

#[path = "gateway/harness.rs"]
mod harness;
#[path = "gateway/health.rs"]
mod health;
#[path = "gateway/hedging.rs"]
mod hedging;
#[path = "gateway/late_finish.rs"]
mod late_finish;
#[path = "gateway/repair.rs"]
mod repair;
