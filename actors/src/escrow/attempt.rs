//! What a race reports about one attempt, and what the escrow answers (how it ended and its
//! timings are in [`crate::outcome`]).

use serde::Serialize;

use crate::{
    outcome::{AttemptEnd, AttemptTimings},
    protocol::proto::DevshardTx,
};

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
    /// The host announced a pause before any work (429, 503, requests disabled, initializing:
    /// [`super::reach::Refusal::is_pause`]): it has not failed this request, so the race may
    /// take it again, which the escrow allows only as the host's probe.
    pub host_paused: bool,
}
