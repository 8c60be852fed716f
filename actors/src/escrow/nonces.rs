//! Bookkeeping of every nonce the escrow handed out until it is settled.

use serde::Serialize;

use crate::{
    outcome::AttemptTimings,
    protocol::{crypto::Address, proto::TimeoutReason, wire::PayloadJson},
};

/// Where an attempt's nonce stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NonceState {
    /// Granted to a race; the race has not reported the end yet.
    InFlight,
    /// Whole answer delivered, finish marker not seen yet; reconciliation polls run.
    PendingFinish { ended_ms: i64, next_poll_ms: u64 },
    /// Failed without a finish; a timeout vote runs at `deadline_ms`.
    AwaitingTimeout {
        deadline_ms: i64,
        reason: crate::policy::reason::OutcomeReason,
    },
    /// Its verified finish marker is sequenced by the diff at `durable_at` (or an earlier one):
    /// the nonce leaves the book once that diff is durable, so a `kill -9` before it cannot lose
    /// a finish the book already let go.
    Finished { durable_at: u64 },
}

/// One unsettled nonce.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NonceEntry {
    pub nonce: u64,
    pub host: Address,
    pub race_id: Option<u64>,
    pub request_id: String,
    /// Unix seconds of `MsgStartInference.started_at` (refusal deadline base).
    pub started_at: i64,
    /// Executor receipt time (unix s), once a receipt was seen.
    pub confirmed_at: Option<i64>,
    #[serde(skip)]
    pub payload: Option<PayloadJson>,
    pub timings: AttemptTimings,
    pub state: NonceState,
    /// Whether the client got this attempt's answer.
    pub crowned: bool,
    /// Whether this attempt's one outcome was emitted already.
    pub emitted: bool,
}

impl NonceEntry {
    pub fn is_in_flight(&self) -> bool {
        matches!(self.state, NonceState::InFlight)
    }

    pub fn is_pending_finish(&self) -> bool {
        matches!(self.state, NonceState::PendingFinish { .. })
    }

    pub fn is_awaiting_timeout(&self) -> bool {
        matches!(self.state, NonceState::AwaitingTimeout { .. })
    }

    /// Protocol deadline after which a timeout may be claimed, and its reason.
    pub fn timeout_deadline(
        &self,
        refusal_timeout_s: i64,
        execution_timeout_s: i64,
        buffer_ms: i64,
    ) -> (i64, TimeoutReason) {
        match self.confirmed_at {
            Some(c) => (
                c.saturating_add(execution_timeout_s)
                    .saturating_mul(1000)
                    .saturating_add(buffer_ms),
                TimeoutReason::Execution,
            ),
            None => (
                self.started_at
                    .saturating_add(refusal_timeout_s)
                    .saturating_mul(1000)
                    .saturating_add(buffer_ms),
                TimeoutReason::Refused,
            ),
        }
    }
}
