//! Client-facing errors of a race that failed before any byte reached the client, as typed
//! [`RaceError`]s (kind, cause, retry-after). Their HTTP statuses are chosen at the edge only.

use super::api::{RaceError, RaceErrorKind};
use crate::{
    escrow::error::EscrowError,
    outcome::{AttemptEnd, OutcomeClass},
};

/// `Retry-After` of an escrow that takes no requests now.
const ESCROW_UNAVAILABLE_RETRY_S: u64 = 5;
/// `Retry-After` when every host is overloaded and none said for how long.
const OVERLOADED_RETRY_S: u64 = 5;

/// The client-facing error of an escrow refusal.
pub(super) fn escrow_error(e: &EscrowError) -> RaceError {
    let (kind, retry) = match e {
        EscrowError::Saturated(_) => (RaceErrorKind::Saturated, Some(1)),
        EscrowError::HostsUnreachable { retry_after_s, .. } => {
            (RaceErrorKind::HostsUnreachable, Some(*retry_after_s))
        }
        EscrowError::HostsCatchingUp { retry_after_s, .. } => {
            (RaceErrorKind::HostsCatchingUp, Some(*retry_after_s))
        }
        EscrowError::AllHostsTried(_)
        | EscrowError::NoRoutableHost(_)
        | EscrowError::HedgeSkipped(_)
        | EscrowError::HedgeWait(_) => (RaceErrorKind::HostsFailed, None),
        EscrowError::NotActive(_) | EscrowError::NonceLimit(_) => (
            RaceErrorKind::EscrowClosed,
            Some(ESCROW_UNAVAILABLE_RETRY_S),
        ),
        // The store is down (or the escrow moved to another replica): fail closed, retry later.
        EscrowError::ShuttingDown(_)
        | EscrowError::NoPreservedHost(_)
        | EscrowError::LeaseLost(_)
        | EscrowError::Store(_) => (
            RaceErrorKind::EscrowUnavailable,
            Some(ESCROW_UNAVAILABLE_RETRY_S),
        ),
        EscrowError::Protocol(_) => (RaceErrorKind::Internal, None),
    };
    RaceError {
        kind,
        message: e.to_string(),
        retry_after_s: retry,
    }
}

/// The escrow did not answer (it is restarting).
pub(super) fn escrow_gone() -> RaceError {
    RaceError {
        kind: RaceErrorKind::EscrowUnavailable,
        message: "the escrow is restarting; retry shortly".into(),
        retry_after_s: Some(1),
    }
}

/// No attempt ran to an answer and none left an error.
pub(super) fn no_answer() -> RaceError {
    RaceError {
        kind: RaceErrorKind::HostsFailed,
        message: "no host produced an answer".into(),
        retry_after_s: None,
    }
}

/// The client-facing error after the last attempt failed; `shared` is the correlation guard's
/// message and fault class when every host failed the same way.
pub(super) fn end_error(end: &AttemptEnd, shared: Option<(String, OutcomeClass)>) -> RaceError {
    let retry_after_s = match end {
        AttemptEnd::Host(e) => e.retry_after().map(|d| d.as_secs().max(1)),
        _ => None,
    };
    if let Some((message, class)) = shared {
        let overloaded = class == OutcomeClass::Overload;
        return RaceError {
            kind: RaceErrorKind::Shared(class),
            message,
            retry_after_s: retry_after_s.or(overloaded.then_some(OVERLOADED_RETRY_S)),
        };
    }
    let (kind, message) = match end {
        AttemptEnd::Host(e) if e.retry_after().is_some() => {
            (RaceErrorKind::HostBusy, format!("host failed: {e}"))
        }
        AttemptEnd::Host(e) => (RaceErrorKind::HostsFailed, format!("host failed: {e}")),
        AttemptEnd::Stalled => (
            RaceErrorKind::Stalled,
            "the host stopped sending before the answer was complete".into(),
        ),
        AttemptEnd::EmptyStream => (
            RaceErrorKind::HostsFailed,
            "the host returned an empty answer".into(),
        ),
        AttemptEnd::ErrorEvent { status, message } => (
            RaceErrorKind::HostErrorEvent {
                host_status: *status,
            },
            message.clone(),
        ),
        AttemptEnd::ReceiptRejected(e) => (
            RaceErrorKind::HostsFailed,
            format!("the host's response failed verification: {e}"),
        ),
        AttemptEnd::Cancelled | AttemptEnd::ClientGone => {
            (RaceErrorKind::Cancelled, "request cancelled".into())
        }
        // Fail closed like a refused grant: nothing reached the client yet, it may retry.
        AttemptEnd::EscrowGone => return escrow_gone(),
        AttemptEnd::Completed => (
            RaceErrorKind::HostsFailed,
            "the answer could not be delivered".into(),
        ),
    };
    RaceError {
        kind,
        message,
        retry_after_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_whose_escrow_stopped_fails_closed_with_retry_after() {
        let e = end_error(&AttemptEnd::EscrowGone, None);
        assert_eq!(e.kind, RaceErrorKind::EscrowUnavailable);
        assert_eq!(e.retry_after_s, Some(1));
        assert_eq!(
            end_error(&AttemptEnd::Cancelled, None).kind,
            RaceErrorKind::Cancelled
        );
    }
}
