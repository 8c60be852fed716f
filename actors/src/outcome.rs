//! The one attributed outcome of an attempt (HEALTH.md §1). Produced once, by the escrow, when
//! the outcome is final; every consumer (health, perf, hedging statistics, metrics, logs) reads
//! this same value.

use actix::Message;
use serde::{Deserialize, Serialize};

use crate::{
    escrow::attempt::AttemptTimings,
    policy::{health::EscrowView, reason::OutcomeReason},
    protocol::crypto::Address,
};

/// Outcome classes of HEALTH.md §1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    Success,
    PendingFinish,
    HostFault,
    Overload,
    EscrowFault,
    GatewayFault,
    RequestFault,
    Diverged,
    Cancelled,
}

impl OutcomeClass {
    /// Label value for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Success => "success",
            OutcomeClass::PendingFinish => "pending_finish",
            OutcomeClass::HostFault => "host_fault",
            OutcomeClass::Overload => "overload",
            OutcomeClass::EscrowFault => "escrow_fault",
            OutcomeClass::GatewayFault => "gateway_fault",
            OutcomeClass::RequestFault => "request_fault",
            OutcomeClass::Diverged => "diverged",
            OutcomeClass::Cancelled => "cancelled",
        }
    }

    /// Only these become perf samples (HEALTH.md §3).
    pub fn is_sample(self) -> bool {
        matches!(self, OutcomeClass::Success | OutcomeClass::HostFault)
    }
}

/// The final outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptOutcome {
    pub escrow_id: String,
    pub nonce: u64,
    pub class: OutcomeClass,
    /// Typed reason (`connect_failed`, `timeout_confirmed`, … when serialized).
    pub reason: OutcomeReason,
    pub timings: AttemptTimings,
    /// The finish marker arrived after the stream ended (ms after the end), if it did.
    pub finish_late_ms: Option<i64>,
}

/// An outcome addressed to a participant's actor (routed by the directory).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ParticipantOutcome {
    pub participant: Address,
    pub outcome: AttemptOutcome,
    /// The attempt was crowned (a stalled winner ejects at once).
    pub winner: bool,
    /// The correlation guard found the fault shared by several hosts: no health effect.
    pub shared: bool,
    /// The sending escrow's view, for the floor and the relative-evidence rule.
    pub escrow_view: EscrowView,
    /// The sending escrow has seen any success at all.
    pub escrow_has_success: bool,
}

/// Where escrows send final outcomes.
pub type OutcomeSink = crate::stats::TrackedRecipient<ParticipantOutcome>;
