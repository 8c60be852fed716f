//! Messages between a `RepairActor` and its escrow.

use actix::Message;
use serde::Serialize;

use crate::{
    escrow::session::SessionError,
    host::RequestSigner,
    protocol::{crypto::Address, wire::ReceiptBody},
};

/// The repair asks its escrow what to send this tick.
#[derive(Debug, Message)]
#[rtype(result = "Result<RepairPlan, String>")]
pub struct PlanRepair {
    pub participant: Address,
}

/// Catch-up chunks (durable canonical diffs the host has not acknowledged, encoded, no payload;
/// signed as each leaves) and the nonce whose signature must then verify.
#[derive(Debug, Clone)]
pub struct RepairPlan {
    pub chat_url: String,
    pub signatures_url: String,
    pub chunks: crate::escrow::prelude::Prelude,
    pub signer: RequestSigner,
    /// Our nonce the catch-up reaches; the host must sign our root at it.
    pub target_nonce: u64,
}

/// What one repair step found.
#[derive(Debug, Message)]
#[rtype(result = "Result<RepairVerdict, SessionError>")]
pub enum RepairStep {
    /// The host answered a catch-up chunk (its sync nonce, state hash and signature).
    CatchUp {
        participant: Address,
        receipt: ReceiptBody,
    },
    /// The host holds fewer diffs than we thought (a nonce gap: what it says it holds; a lost
    /// session: 0): replay from there next tick.
    HostBehind { participant: Address, holds: u64 },
    /// A signature the host returned for `nonce`.
    Signature {
        participant: Address,
        nonce: u64,
        signature: Vec<u8>,
    },
}

/// The escrow's verdict after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairVerdict {
    Continue,
    /// A signature over our root verified: the participant is unblocked.
    Unblocked,
}

/// The repair gave up (after `repair_give_up_ms`): the participant stays blocked.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RepairGaveUp {
    pub participant: Address,
}

/// Admin: run a repair tick now.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RepairNow;

/// The escrow has no routable host and this participant is one reason: tick now unless a tick is
/// running or the repair gave up (the escrow rate-limits these, docs/health.md §6.4).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RepairUrgently;

/// Stop the repair (escrow retired or participant forgotten).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopRepair;

/// Debug view of a repair.
#[derive(Debug, Message)]
#[rtype(result = "RepairState")]
pub struct GetRepairState;

/// What `GetRepairState` returns.
#[derive(Debug, Clone, Serialize)]
pub struct RepairState {
    pub participant: Address,
    pub blocked_since_ms: i64,
    pub attempts: u32,
    pub last_result: String,
    pub next_tick_ms: Option<i64>,
    pub gave_up: bool,
}
