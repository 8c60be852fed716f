//! Errors an escrow returns to races and the HTTP edge.

use serde::Serialize;

use super::session::SessionError;
use crate::{protocol::crypto::Address, store::StoreError};

/// Why the escrow could not serve a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum EscrowError {
    #[error("escrow {0} is finalizing or settled")]
    NotActive(String),
    #[error("escrow {0} is at its chain nonce limit")]
    NonceLimit(String),
    #[error("no routable host in escrow {0}")]
    NoRoutableHost(String),
    #[error("every host of escrow {0} was tried")]
    AllHostsTried(String),
    /// Relaxed PoC: none of the hosts the request may use (the preserved ones) is routable.
    #[error("no host of escrow {0} that the chain keeps preserved during PoC can be routed to")]
    NoPreservedHost(String),
    /// The reachability gate is closed (`escrow/reach/mod.rs`): no nonce was taken.
    #[error(
        "no host of escrow {escrow} takes requests now ({refusing} {cause} since their last answer); the gateway keeps probing them, retry after {retry_after_s} s"
    )]
    HostsUnreachable {
        escrow: String,
        refusing: usize,
        /// What most of them said last.
        cause: crate::escrow::reach::Refusal,
        retry_after_s: u64,
    },
    /// Every host the request could use is being caught up in the background from far behind
    /// (`escrow/reach/mod.rs`): no nonce was taken.
    #[error(
        "every host of escrow {escrow} that could serve this request is catching up on diffs it lacks (host {host}: {lacks} diffs behind); retry after {retry_after_s} s"
    )]
    HostsCatchingUp {
        escrow: String,
        host: String,
        lacks: u64,
        retry_after_s: u64,
    },
    #[error("escrow {0} is saturated; retry later")]
    Saturated(String),
    #[error("could not make the diff durable: {0}")]
    Store(String),
    /// Another replica took the escrow over; this replica stopped serving it.
    #[error("escrow {0} moved to another replica; retry")]
    LeaseLost(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("escrow {0} is shutting down")]
    ShuttingDown(String),
    /// No hedge for this request now (`budget`, `no_faster_host`, `max_attempts`, `not_needed`).
    #[error("hedge skipped: {0}")]
    HedgeSkipped(String),
    /// Ask for the hedge again at this time (unix ms).
    #[error("hedge not due before {0}")]
    HedgeWait(i64),
}

/// Diffs a second a background catch-up is counted on to send (the hour-long run measured
/// 1 600–2 600), for the `Retry-After` of a request refused while one runs.
const CATCH_UP_DIFFS_PER_S: u64 = 2_000;

impl EscrowError {
    /// Every host that could serve is caught up in the background; `host` lacks `lacks` diffs.
    /// `Retry-After`: the time to send them at [`CATCH_UP_DIFFS_PER_S`], 1–30 s.
    pub fn hosts_catching_up(escrow: String, host: &Address, lacks: u64) -> EscrowError {
        EscrowError::HostsCatchingUp {
            escrow,
            host: host.short().to_owned(),
            lacks,
            retry_after_s: lacks.div_ceil(CATCH_UP_DIFFS_PER_S).clamp(1, 30),
        }
    }
}

impl From<StoreError> for EscrowError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::LeaseLost { escrow, .. } | StoreError::LeaseHeld { escrow, .. } => {
                EscrowError::LeaseLost(escrow)
            }
            e => EscrowError::Store(e.to_string()),
        }
    }
}

impl From<SessionError> for EscrowError {
    fn from(e: SessionError) -> Self {
        EscrowError::Protocol(e.to_string())
    }
}
