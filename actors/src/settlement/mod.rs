//! Settling an escrow on chain (LIFECYCLE.md §1–§3, PROTOCOL.md §5.7–§5.8).
//!
//! # Layout
//! - [`machine`]: the persisted [`SettlementRecord`] and the pure decisions of each step.
//! - [`SettlementActor`] (`actor.rs`): drives one escrow's record; [`port::EscrowSteps`] is what
//!   it needs from the escrow (drain, finalize rounds, final state, catch-up).
//! - [`collect`](mod@collect): fetching and verifying state signatures of the final nonce;
//!   [`quorum`]: their weight and the `2·slots/3 + 1` quorum.
//! - [`payload`]: the settlement payload JSON and the `MsgSettleDevshardEscrow` built from it;
//!   the Cosmos tx itself is [`crate::protocol::cosmos`].
//! - [`chain`]: the chain REST calls (chain id, account number, broadcast, tx lookup).
//! - [`metrics`]: `settlements_total{result}`, `escrows{escrow,state}`,
//!   `settlement_duration_seconds`, `settlement_retries_total{step}`.

mod actor;
pub mod chain;
pub mod collect;
pub mod escrow_port;
pub mod machine;
pub mod metrics;
pub mod payload;
pub mod port;
pub mod quorum;
mod steps;

pub use actor::{
    load_record, GetSettlement, SettlementActor, SettlementDeps, StartSettlement, NS_SETTLEMENT,
};
pub use machine::{SettlementRecord, SettlementState};
