//! What a race reports about one attempt, and what the escrow answers.

use serde::Serialize;

use super::session::SessionError;
use crate::{host::HostError, protocol::proto::DevshardTx};

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
    /// The escrow rejected the attempt's receipt (state hash, state signature, receipt signature).
    ReceiptRejected(SessionError),
}

/// One attempt's final report.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptReport {
    pub timings: AttemptTimings,
    pub end: AttemptEnd,
    /// Transactions of the `devshard_meta` event, when it arrived.
    pub mempool: Option<Vec<DevshardTx>>,
    /// Whether this attempt was crowned (its bytes went to the client).
    pub crowned: bool,
}

/// The escrow's answer to an ended attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AttemptVerdict {
    /// Another attempt on another host may help.
    pub retry: bool,
    /// Set when the failure is shared by several hosts (the client gets this message).
    pub shared_fault: Option<String>,
    /// The class of a shared fault (the edge chooses the client's status from it).
    pub shared_class: Option<crate::outcome::OutcomeClass>,
}
