//! Attribution: the pure function that turns what happened to an attempt into one outcome class
//! (HEALTH.md §1). Classification is on typed errors only.

use crate::{
    host::{HostError, Rejection},
    outcome::{AttemptEnd, OutcomeClass},
    protocol::session_error::SessionError,
};

/// Class and machine-readable reason of an attempt that ended as `end`.
/// `finished`: the nonce's verified finish marker has been seen.
pub fn classify(end: &AttemptEnd, finished: bool) -> (OutcomeClass, &'static str) {
    match end {
        AttemptEnd::Completed if finished => (OutcomeClass::Success, "finished"),
        AttemptEnd::Completed => (OutcomeClass::PendingFinish, "finish_pending"),
        AttemptEnd::EmptyStream => (OutcomeClass::HostFault, "empty_stream"),
        AttemptEnd::Stalled => (OutcomeClass::HostFault, "stalled"),
        AttemptEnd::Cancelled => (OutcomeClass::Cancelled, "cancelled"),
        AttemptEnd::ClientGone => (OutcomeClass::RequestFault, "client_gone"),
        AttemptEnd::ErrorEvent {
            status: Some(s), ..
        } if (400..500).contains(s) => (OutcomeClass::RequestFault, "error_event_request"),
        AttemptEnd::ErrorEvent { .. } => (OutcomeClass::HostFault, "error_event"),
        AttemptEnd::ReceiptRejected(e) => classify_session(e),
        AttemptEnd::Host(e) => classify_host(e),
    }
}

fn classify_session(e: &SessionError) -> (OutcomeClass, &'static str) {
    match e {
        SessionError::StateHashMismatch { .. } | SessionError::HostAhead { .. } => {
            (OutcomeClass::Diverged, "state_hash_mismatch")
        }
        SessionError::InvalidStateSig(_) => (OutcomeClass::HostFault, "invalid_state_sig"),
        SessionError::InvalidReceipt { .. } => (OutcomeClass::HostFault, "invalid_receipt"),
        _ => (OutcomeClass::GatewayFault, "session_error"),
    }
}

/// Class of a failed host call.
pub fn classify_host(e: &HostError) -> (OutcomeClass, &'static str) {
    match e {
        HostError::Connect(_) => (OutcomeClass::HostFault, "connect_failed"),
        HostError::Transport(_) => (OutcomeClass::HostFault, "transport"),
        HostError::Timeout(_) => (OutcomeClass::HostFault, "timeout"),
        HostError::Truncated => (OutcomeClass::HostFault, "truncated"),
        HostError::Decode(_) => (OutcomeClass::HostFault, "undecodable"),
        HostError::Tls(_) => (OutcomeClass::GatewayFault, "tls_untrusted"),
        HostError::Status { rejection, .. } => match rejection {
            Rejection::TimestampDrift => (OutcomeClass::HostFault, "timestamp_drift"),
            Rejection::BadAuth => (OutcomeClass::GatewayFault, "bad_auth"),
            Rejection::NotEscrowOwner => (OutcomeClass::EscrowFault, "not_escrow_owner"),
            Rejection::NotInGroup => (OutcomeClass::EscrowFault, "sender_not_in_group"),
            Rejection::EscrowNotFound => (OutcomeClass::EscrowFault, "escrow_not_found"),
            Rejection::RouteNotFound => (OutcomeClass::HostFault, "not_found"),
            Rejection::SessionNotFound => (OutcomeClass::HostFault, "session_not_found"),
            Rejection::RootMismatch { .. } => (OutcomeClass::Diverged, "post_state_root_mismatch"),
            Rejection::NonceGap { .. } => (OutcomeClass::HostFault, "nonce_gap"),
            Rejection::RequestsDisabled => (OutcomeClass::Overload, "requests_disabled"),
            Rejection::Initializing => (OutcomeClass::Overload, "initializing"),
            Rejection::RateLimited => (OutcomeClass::Overload, "rate_limited"),
            Rejection::Unavailable => (OutcomeClass::Overload, "unavailable"),
            Rejection::BadRequest => (OutcomeClass::RequestFault, "bad_request"),
            Rejection::Conflict | Rejection::Other => (OutcomeClass::HostFault, "host_error"),
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
