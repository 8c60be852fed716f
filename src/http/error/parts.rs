//! The status, `type`, `code` and `Retry-After` of each layer's errors (races, the directory,
//! the store, the chain, escrow picks): the one place they map to HTTP ([`super::ApiError::parts`]
//! dispatches here).

use bytes::Bytes;
use devshard_actors::{
    directory::DirectoryError,
    outcome::OutcomeClass,
    policy::reason::PickRefusal,
    protocol::sse,
    race::{RaceError, RaceErrorKind},
    store::StoreError,
};
use serde_json::json;

use super::{
    ApiError, DATABASE_UNAVAILABLE_RETRY_AFTER_S, DEFAULT_RETRY_AFTER_S,
    FAILED_ESCROW_RETRY_AFTER_S, INVALID, NO_ACTIVE_ESCROW_RETRY_AFTER_S, SERVER,
    TRANSIENT_NO_ESCROW_RETRY_AFTER_S, UNAVAILABLE, UPSTREAM,
};
use crate::chain::ChainError;

/// Status, `type`, `code`, `param` and `Retry-After` of an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorParts {
    pub status: u16,
    pub kind: String,
    pub code: String,
    pub param: Option<String>,
    pub retry_after_s: Option<u64>,
}

pub(super) fn parts(status: u16, kind: &str, code: &str) -> ErrorParts {
    let retry_after_s = matches!(status, 429 | 503).then_some(DEFAULT_RETRY_AFTER_S);
    ErrorParts {
        status,
        kind: kind.to_string(),
        code: code.to_string(),
        param: None,
        retry_after_s,
    }
}

/// Status and OpenAI `type` (also the `code`) of a race's typed error.
pub(super) fn race_status(kind: RaceErrorKind) -> (u16, &'static str) {
    match kind {
        RaceErrorKind::Saturated => (429, "rate_limit_exceeded"),
        RaceErrorKind::EscrowUnavailable
        | RaceErrorKind::EscrowClosed
        | RaceErrorKind::HostsUnreachable
        | RaceErrorKind::HostsCatchingUp => (503, UNAVAILABLE),
        RaceErrorKind::Internal => (500, "internal_error"),
        RaceErrorKind::HostsFailed => (502, UPSTREAM),
        RaceErrorKind::HostBusy => (503, UPSTREAM),
        RaceErrorKind::Stalled => (504, "timeout"),
        RaceErrorKind::HostErrorEvent { host_status } => {
            match host_status.filter(|s| (400..600).contains(s)) {
                Some(504) => (504, "timeout"),
                Some(s) if s < 500 => (s, INVALID),
                Some(s) => (s, UPSTREAM),
                None => (502, UPSTREAM),
            }
        }
        RaceErrorKind::Cancelled => (499, INVALID),
        RaceErrorKind::Shared(OutcomeClass::Overload) => (503, UNAVAILABLE),
        RaceErrorKind::Shared(OutcomeClass::RequestFault) => (400, UPSTREAM),
        RaceErrorKind::Shared(_) => (502, UPSTREAM),
    }
}

pub(super) fn race_parts(e: &RaceError) -> ErrorParts {
    let (status, kind) = race_status(e.kind);
    let code = match e.kind {
        RaceErrorKind::HostsUnreachable => "hosts_unreachable",
        RaceErrorKind::HostsCatchingUp => "hosts_catching_up",
        _ => kind,
    };
    let mut p = parts(status, kind, code);
    if e.retry_after_s.is_some() {
        p.retry_after_s = e.retry_after_s;
    }
    p
}

/// The SSE error event a streaming client gets when the winner broke mid-stream (the response
/// status is already 200; the event names the upstream failure).
pub fn stream_error_event(message: &str) -> Bytes {
    let body = json!({"error": {"message": message, "type": UPSTREAM, "code": 502}});
    sse::data_event(body.to_string().as_bytes())
}

pub(super) fn directory_parts(e: &DirectoryError) -> ErrorParts {
    match e {
        DirectoryError::UnknownModel(_) => ErrorParts {
            param: Some("model".into()),
            ..parts(404, INVALID, "model_not_found")
        },
        DirectoryError::UnknownEscrow(_) => parts(404, INVALID, "escrow_not_found"),
        DirectoryError::EscrowFailed(_) => ErrorParts {
            retry_after_s: Some(FAILED_ESCROW_RETRY_AFTER_S),
            ..parts(503, UNAVAILABLE, "escrow_failed")
        },
        DirectoryError::NoneQualifies { model, refusals } => no_escrow_parts(model, refusals),
        DirectoryError::Start(..) => parts(500, SERVER, "escrow_start_failed"),
        DirectoryError::AlreadyRegistered(_) => parts(409, INVALID, "escrow_already_registered"),
        DirectoryError::Admin(_) => parts(500, SERVER, "participant_admin_failed"),
        DirectoryError::Store(e) => store_parts(e),
    }
}

/// A store error: 503 `database_unavailable` + Retry-After while the database is unreachable
/// (it passes by itself: the store reconnects), else 500 `store_error`.
pub(super) fn store_parts(e: &StoreError) -> ErrorParts {
    if e.is_unavailable() {
        ErrorParts {
            retry_after_s: Some(DATABASE_UNAVAILABLE_RETRY_AFTER_S),
            ..parts(503, UNAVAILABLE, "database_unavailable")
        }
    } else {
        parts(500, SERVER, "store_error")
    }
}

/// Every escrow deactivated → `no_active_escrow` (Retry-After 30); else `no_escrow_available`,
/// Retry-After 5 when a refusal passes by itself (a host back, an actor restarted), else 30.
pub(super) fn no_escrow_parts(model: &str, refusals: &[(String, PickRefusal)]) -> ErrorParts {
    if refusals.iter().all(|(_, r)| *r == PickRefusal::Deactivated) {
        return ApiError::NoActiveEscrow(model.to_owned()).parts();
    }
    let transient = refusals.iter().any(|(_, r)| r.is_transient());
    ErrorParts {
        retry_after_s: Some(if transient {
            TRANSIENT_NO_ESCROW_RETRY_AFTER_S
        } else {
            NO_ACTIVE_ESCROW_RETRY_AFTER_S
        }),
        ..parts(503, UNAVAILABLE, "no_escrow_available")
    }
}

pub(super) fn chain_parts(e: &ChainError) -> ErrorParts {
    match e {
        ChainError::InvalidEscrowId(_) => ErrorParts {
            param: Some("escrow_id".into()),
            ..parts(400, INVALID, "invalid_escrow_id")
        },
        ChainError::EscrowNotFound(_) => ErrorParts {
            param: Some("escrow_id".into()),
            ..parts(404, INVALID, "escrow_not_found")
        },
        ChainError::EscrowSettled(_) => parts(409, INVALID, "escrow_settled"),
        ChainError::CreatorMismatch { .. } => parts(400, INVALID, "escrow_creator_mismatch"),
        ChainError::UnknownModel(_) => ErrorParts {
            param: Some("model".into()),
            ..parts(400, INVALID, "model_required")
        },
        ChainError::EmptyGroup(_)
        | ChainError::InvalidAddress { .. }
        | ChainError::ParticipantNotFound { .. }
        | ChainError::MissingInferenceUrl { .. } => parts(502, UPSTREAM, "chain_data_invalid"),
        ChainError::Transport { .. } | ChainError::Status { .. } | ChainError::Decode { .. } => {
            parts(502, UPSTREAM, "chain_unavailable")
        }
        ChainError::Tls { .. } => parts(502, UPSTREAM, "chain_tls_untrusted"),
    }
}
