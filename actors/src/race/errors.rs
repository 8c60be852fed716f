//! Client-facing errors of a race that failed before any byte reached the client.

use super::api::RaceError;
use crate::{escrow::error::EscrowError, outcome::AttemptEnd};

/// The client-facing error of an escrow refusal.
pub(super) fn escrow_error(e: &EscrowError) -> RaceError {
    let (status, kind, retry) = match e {
        EscrowError::Saturated(_) => (429, "rate_limit_exceeded", Some(1)),
        EscrowError::AllHostsTried(_) | EscrowError::NoRoutableHost(_) => {
            (502, "upstream_error", None)
        }
        EscrowError::NotActive(_) | EscrowError::NonceLimit(_) | EscrowError::ShuttingDown(_) => {
            (503, "service_unavailable", Some(5))
        }
        EscrowError::HedgeSkipped(_) | EscrowError::HedgeWait(_) => (502, "upstream_error", None),
        EscrowError::Store(_) | EscrowError::Protocol(_) => (500, "internal_error", None),
    };
    RaceError {
        status,
        kind: kind.into(),
        message: e.to_string(),
        retry_after_s: retry,
    }
}

/// The client-facing error after the last attempt failed; `shared` is the correlation guard's
/// message and status when every host failed the same way.
pub(super) fn end_error(end: &AttemptEnd, shared: Option<(String, u16)>) -> RaceError {
    let retry_after_s = match end {
        AttemptEnd::Host(e) => e.retry_after().map(|d| d.as_secs().max(1)),
        _ => None,
    };
    if let Some((message, status)) = shared {
        let kind = if status == 503 {
            "service_unavailable"
        } else {
            "upstream_error"
        };
        let retry_after_s = retry_after_s.or((status == 503).then_some(5));
        return RaceError {
            status,
            kind: kind.into(),
            message,
            retry_after_s,
        };
    }
    let (status, message) = match end {
        AttemptEnd::Host(e) => (
            if e.retry_after().is_some() { 503 } else { 502 },
            format!("host failed: {e}"),
        ),
        AttemptEnd::Stalled => (
            504,
            "the host stopped sending before the answer was complete".into(),
        ),
        AttemptEnd::EmptyStream => (502, "the host returned an empty answer".into()),
        AttemptEnd::ErrorEvent { status, message } => (
            status.filter(|s| (400..600).contains(s)).unwrap_or(502),
            message.clone(),
        ),
        AttemptEnd::ReceiptRejected(e) => {
            (502, format!("the host's response failed verification: {e}"))
        }
        AttemptEnd::Cancelled | AttemptEnd::ClientGone => (499, "request cancelled".into()),
        AttemptEnd::Completed => (502, "the answer could not be delivered".into()),
    };
    let kind = if status == 504 {
        "timeout"
    } else if status < 500 {
        "invalid_request_error"
    } else {
        "upstream_error"
    };
    RaceError {
        status,
        kind: kind.into(),
        message,
        retry_after_s,
    }
}
