//! The one attributed outcome of an attempt (docs/health.md §1). Produced once, by the escrow, when
//! the outcome is final; every consumer (health, perf, hedging statistics, metrics, logs) reads
//! this same value.

use actix::Message;
use serde::{Deserialize, Serialize};

use crate::{
    host::HostError,
    policy::{health::EscrowView, reason::OutcomeReason},
    protocol::{crypto::Address, session_error::SessionError},
};

/// Timestamps of one attempt (unix ms), taken by the race when each event happened. Samples are
/// built from these, never from "now at settlement".
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct AttemptTimings {
    pub send_ms: i64,
    pub receipt_ms: Option<i64>,
    pub first_token_ms: Option<i64>,
    pub first_content_ms: Option<i64>,
    pub end_ms: i64,
    /// Request body bytes (`input_length`).
    pub input_bytes: u64,
    /// Content chunks forwarded (≈ output tokens for streaming hosts).
    pub content_chunks: u32,
}

/// How an attempt ended, as the race saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// `[DONE]` seen after content: the whole answer was delivered.
    Completed,
    /// The host refused or failed (HTTP status, transport, truncation).
    Host(HostError),
    /// Receipt and `[DONE]` but no content chunk.
    EmptyStream,
    /// The host streamed an OpenAI error event.
    ErrorEvent {
        status: Option<u16>,
        message: String,
    },
    /// No progress for longer than the stall limit.
    Stalled,
    /// We cancelled it (a loser after the winner's first content, or a hedge no longer needed).
    Cancelled,
    /// The client went away.
    ClientGone,
    /// The escrow actor stopped while the attempt ran (its store became unavailable, or its lease
    /// moved to another replica): the receipt could not be recorded. No host is blamed.
    EscrowGone,
    /// The escrow rejected the attempt's receipt (state hash, state signature, receipt signature).
    ReceiptRejected(SessionError),
}

/// Outcome classes of docs/health.md §1.
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

    /// Only these become perf samples (docs/health.md §3).
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
