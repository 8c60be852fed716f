//! Settling an escrow on chain (LIFECYCLE.md §1–§3, PROTOCOL.md §5.7–§5.8).
//!
//! # Layout
//! - [`quorum`]: verifying state signatures of the final root, their weight and the quorum.
//! - [`payload`]: the settlement payload JSON and the `MsgSettleDevshardEscrow` built from it.
//! - the Cosmos tx itself is [`crate::protocol::cosmos`].

pub mod payload;
pub mod quorum;
