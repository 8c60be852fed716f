//! Attribution: the pure function that turns what happened to an attempt into one outcome class
//! (docs/health.md §1) and its typed [`OutcomeReason`]. Classification is on typed errors only.

use crate::{
    host::{error, HostError, Rejection},
    outcome::{AttemptEnd, OutcomeClass},
    policy::reason::OutcomeReason,
    protocol::session_error::SessionError,
};

/// Class and machine-readable reason of an attempt that ended as `end`.
/// `finished`: the nonce's verified finish marker has been seen.
pub fn classify(end: &AttemptEnd, finished: bool) -> (OutcomeClass, OutcomeReason) {
    match end {
        AttemptEnd::Completed if finished => (OutcomeClass::Success, OutcomeReason::Finished),
        AttemptEnd::Completed => (OutcomeClass::PendingFinish, OutcomeReason::FinishPending),
        AttemptEnd::EmptyStream => (OutcomeClass::HostFault, OutcomeReason::EmptyStream),
        AttemptEnd::Stalled => (OutcomeClass::HostFault, OutcomeReason::Stalled),
        AttemptEnd::Cancelled | AttemptEnd::EscrowGone => {
            (OutcomeClass::Cancelled, OutcomeReason::Cancelled)
        }
        AttemptEnd::ClientGone => (OutcomeClass::RequestFault, OutcomeReason::ClientGone),
        AttemptEnd::ErrorEvent {
            status: Some(s), ..
        } if error::blames_request(*s) => {
            (OutcomeClass::RequestFault, OutcomeReason::ErrorEventRequest)
        }
        AttemptEnd::ErrorEvent { .. } => (OutcomeClass::HostFault, OutcomeReason::ErrorEvent),
        AttemptEnd::ReceiptRejected(e) => classify_session(e),
        AttemptEnd::Host(e) => classify_host(e),
    }
}

fn classify_session(e: &SessionError) -> (OutcomeClass, OutcomeReason) {
    match e {
        SessionError::StateHashMismatch { .. } | SessionError::HostAhead { .. } => {
            (OutcomeClass::Diverged, OutcomeReason::StateHashMismatch)
        }
        SessionError::InvalidStateSig(_) => {
            (OutcomeClass::HostFault, OutcomeReason::InvalidStateSig)
        }
        SessionError::InvalidReceipt { .. } => {
            (OutcomeClass::HostFault, OutcomeReason::InvalidReceipt)
        }
        // Another protocol version or root composition: the escrow cannot be served by that
        // host as configured; no repair, no strike.
        SessionError::Unreproducible { .. } => (
            OutcomeClass::EscrowFault,
            OutcomeReason::UnsupportedProtocol,
        ),
        // The chain did not answer about a warm key: our problem, never the host's.
        SessionError::WarmKeyUnresolved { .. } => {
            (OutcomeClass::GatewayFault, OutcomeReason::WarmKeyUnverified)
        }
        _ => (OutcomeClass::GatewayFault, OutcomeReason::SessionError),
    }
}

/// Class of a failed host call.
pub fn classify_host(e: &HostError) -> (OutcomeClass, OutcomeReason) {
    match e {
        HostError::Connect(_) => (OutcomeClass::HostFault, OutcomeReason::ConnectFailed),
        HostError::Transport(_) => (OutcomeClass::HostFault, OutcomeReason::Transport),
        HostError::Timeout(_) => (OutcomeClass::HostFault, OutcomeReason::Timeout),
        HostError::Truncated => (OutcomeClass::HostFault, OutcomeReason::Truncated),
        HostError::Decode(_) => (OutcomeClass::HostFault, OutcomeReason::Undecodable),
        HostError::Tls(_) => (OutcomeClass::GatewayFault, OutcomeReason::TlsUntrusted),
        HostError::Status { rejection, .. } => match rejection {
            Rejection::TimestampDrift => (OutcomeClass::HostFault, OutcomeReason::TimestampDrift),
            Rejection::BadAuth => (OutcomeClass::GatewayFault, OutcomeReason::BadAuth),
            Rejection::NotEscrowOwner => (OutcomeClass::EscrowFault, OutcomeReason::NotEscrowOwner),
            Rejection::NotInGroup => (OutcomeClass::EscrowFault, OutcomeReason::SenderNotInGroup),
            Rejection::EscrowNotFound => (OutcomeClass::EscrowFault, OutcomeReason::EscrowNotFound),
            Rejection::RouteNotFound => (OutcomeClass::HostFault, OutcomeReason::NotFound),
            Rejection::SessionNotFound => (OutcomeClass::HostFault, OutcomeReason::SessionNotFound),
            Rejection::RootMismatch { .. } => {
                (OutcomeClass::Diverged, OutcomeReason::PostStateRootMismatch)
            }
            Rejection::NonceGap { .. } => (OutcomeClass::HostFault, OutcomeReason::NonceGap),
            Rejection::RequestsDisabled => {
                (OutcomeClass::Overload, OutcomeReason::RequestsDisabled)
            }
            Rejection::Initializing => (OutcomeClass::Overload, OutcomeReason::Initializing),
            Rejection::RateLimited => (OutcomeClass::Overload, OutcomeReason::RateLimited),
            Rejection::Unavailable => (OutcomeClass::Overload, OutcomeReason::Unavailable),
            Rejection::BadRequest => (OutcomeClass::RequestFault, OutcomeReason::BadRequest),
            Rejection::Conflict | Rejection::Other => {
                (OutcomeClass::HostFault, OutcomeReason::HostError)
            }
        },
    }
}

/// Whether another attempt on another host may help after an attempt of this class failed
/// before any content reached the client.
pub fn worth_retrying(class: OutcomeClass) -> bool {
    matches!(
        class,
        OutcomeClass::HostFault
            | OutcomeClass::Overload
            | OutcomeClass::Diverged
            | OutcomeClass::EscrowFault
            | OutcomeClass::GatewayFault
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_finish_is_pending_not_a_fault() {
        assert_eq!(
            classify(&AttemptEnd::Completed, false).0,
            OutcomeClass::PendingFinish
        );
        assert_eq!(
            classify(&AttemptEnd::Completed, true).0,
            OutcomeClass::Success
        );
    }

    #[test]
    fn owner_mismatch_is_an_escrow_fault() {
        let e = HostError::from_status(
            403,
            br#"{"message":"restricted to escrow owner"}"#,
            None,
            None,
        );
        assert_eq!(
            classify(&AttemptEnd::Host(e), false).0,
            OutcomeClass::EscrowFault
        );
    }
}
