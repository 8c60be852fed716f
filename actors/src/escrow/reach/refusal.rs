//! Why a host takes no nonces but probes (`reach/mod.rs`): it refused a connection, or it
//! rejected a request before doing any work (429, 503, a 404 route, a 401/403 or an unknown
//! escrow). Either way a nonce granted to it would only open an inference that a
//! refused-timeout vote must settle later: the hour-long chaos run's rounds of 429, 404 and 500
//! on every host burnt 2 000 nonces in 2 s, then 1 200 timeout votes in 5 s, and no request was
//! picked for 4 s after the faults cleared.

use std::fmt;

use serde::Serialize;

use crate::policy::reason::OutcomeReason;

/// See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The host refused a connection.
    Connect,
    /// The host answered this rejection before any work.
    Rejected(OutcomeReason),
}

impl Refusal {
    /// The refusal an attempt that ended for `reason` shows, if any. Rejections that need more
    /// than a pause (a nonce gap, a session the host lost, a state root it disputes) are not
    /// refusals: the escrow repairs them (sync, rewind, repair).
    pub fn of(reason: OutcomeReason) -> Option<Refusal> {
        match reason {
            OutcomeReason::ConnectFailed => Some(Refusal::Connect),
            OutcomeReason::RateLimited
            | OutcomeReason::Unavailable
            | OutcomeReason::RequestsDisabled
            | OutcomeReason::Initializing
            | OutcomeReason::NotFound
            | OutcomeReason::BadAuth
            | OutcomeReason::TimestampDrift
            | OutcomeReason::NotEscrowOwner
            | OutcomeReason::SenderNotInGroup
            | OutcomeReason::EscrowNotFound => Some(Refusal::Rejected(reason)),
            _ => None,
        }
    }

    /// A pause the host announced (overloaded, disabled, starting), which passes on its own and
    /// strikes nobody, as against a refused connection (the host is down; another attempt at
    /// it would be one more strike) or a rejection that needs an operator (a 404 route, bad
    /// auth, a clock off, a key or an escrow the host does not know).
    pub fn is_pause(self) -> bool {
        matches!(
            self,
            Refusal::Rejected(
                OutcomeReason::RateLimited
                    | OutcomeReason::Unavailable
                    | OutcomeReason::RequestsDisabled
                    | OutcomeReason::Initializing
            )
        )
    }

    /// The label of logs and of the escrow snapshot.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Connect => "connect_failed",
            Refusal::Rejected(r) => r.as_str(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Connect => f.write_str("refused connections"),
            Refusal::Rejected(r) => match r.client_message() {
                Some((said, cause)) => write!(f, "rejected requests: \"{said}\" ({cause})"),
                None => write!(f, "rejected requests ({})", r.as_str()),
            },
        }
    }
}

impl Serialize for Refusal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejection_before_any_work_is_a_refusal_and_a_state_dispute_is_not() {
        assert_eq!(
            Refusal::of(OutcomeReason::RateLimited),
            Some(Refusal::Rejected(OutcomeReason::RateLimited))
        );
        assert_eq!(
            Refusal::of(OutcomeReason::ConnectFailed),
            Some(Refusal::Connect)
        );
        for r in [
            OutcomeReason::NonceGap,
            OutcomeReason::SessionNotFound,
            OutcomeReason::PostStateRootMismatch,
            OutcomeReason::BadRequest,
            OutcomeReason::Timeout,
            OutcomeReason::HostError,
        ] {
            assert_eq!(Refusal::of(r), None, "{r:?}");
        }
    }

    #[test]
    fn only_a_pause_lets_a_race_come_back_to_the_host() {
        let paused = |r| Refusal::of(r).is_some_and(Refusal::is_pause);
        assert!(!paused(OutcomeReason::ConnectFailed));
        assert!(paused(OutcomeReason::RequestsDisabled));
        assert!(paused(OutcomeReason::RateLimited));
        assert!(!paused(OutcomeReason::NotEscrowOwner));
        assert!(!paused(OutcomeReason::TimestampDrift));
        assert!(!paused(OutcomeReason::NonceGap));
    }

    #[test]
    fn the_message_names_what_the_hosts_said() {
        let owner = Refusal::Rejected(OutcomeReason::NotEscrowOwner).to_string();
        assert!(owner.contains("escrow owner"), "{owner}");
        assert_eq!(Refusal::Connect.to_string(), "refused connections");
    }
}
