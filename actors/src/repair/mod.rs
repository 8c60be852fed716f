//! Repair of participants whose state diverged from the escrow's (docs/health.md §6).

mod actor;
pub mod messages;

pub use actor::{RepairActor, RepairDeps};
