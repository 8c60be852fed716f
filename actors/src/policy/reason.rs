//! Typed reasons: why an attempt ended the way it did ([`OutcomeReason`], produced by
//! [`super::attribution`] and by the escrow's timeout and finish paths), and why the escrow
//! composed a diff without an inference ([`EmptyDiffReason`]).
//!
//! Decisions match on these variants only (byzantine ejection, the correlation guard's cause
//! message, the withheld-nonce metric). Logs, metric labels and serialized forms (debug JSON)
//! use [`OutcomeReason::as_str`] / [`EmptyDiffReason::as_str`], the one place that spells them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines a reason enum, its `as_str` spelling and the list of every variant from one table.
macro_rules! reasons {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The log stage / metric label / serialized spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            /// The spelling of [`Self::as_str`] (a persisted record's reasons).
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $name::ALL
                    .iter()
                    .copied()
                    .find(|r| r.as_str() == text)
                    .ok_or_else(|| serde::de::Error::unknown_variant(&text, &[$($text,)*]))
            }
        }

        impl slog::Value for $name {
            fn serialize(
                &self,
                _: &slog::Record<'_>,
                key: slog::Key,
                s: &mut dyn slog::Serializer,
            ) -> slog::Result {
                s.emit_str(key, self.as_str())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

reasons! {
    /// Why an attempt ended as it did (the `reason` of an outcome, a fault signature and a nonce
    /// awaiting its timeout vote).
    OutcomeReason {
        /// Verified finish marker seen.
        Finished => "finished",
        /// The finish marker arrived after the stream ended.
        FinishedLate => "finished_late",
        /// Whole answer delivered, finish marker not seen yet.
        FinishPending => "finish_pending",
        /// The finish marker never arrived before the execution deadline.
        FinishNeverArrived => "finish_never_arrived",
        /// A granted nonce no attempt used.
        GrantUnclaimed => "grant_unclaimed",
        /// A nonce a repair sent to a host to close a ghost inference.
        Ghost => "ghost",
        /// The other hosts' signed votes confirmed the timeout.
        TimeoutConfirmed => "timeout_confirmed",
        /// The timeout vote did not reach the threshold.
        TimeoutUnconfirmed => "timeout_unconfirmed",
        EmptyStream => "empty_stream",
        Stalled => "stalled",
        Cancelled => "cancelled",
        ClientGone => "client_gone",
        /// The host sent an error event blaming the request.
        ErrorEventRequest => "error_event_request",
        ErrorEvent => "error_event",
        StateHashMismatch => "state_hash_mismatch",
        InvalidStateSig => "invalid_state_sig",
        InvalidReceipt => "invalid_receipt",
        SessionError => "session_error",
        /// The host's root is our state under another protocol version or root composition.
        UnsupportedProtocol => "unsupported_protocol",
        /// The chain did not answer whether a warm key is granted: the gateway's problem.
        WarmKeyUnverified => "warm_key_unverified",
        ConnectFailed => "connect_failed",
        Transport => "transport",
        Timeout => "timeout",
        Truncated => "truncated",
        Undecodable => "undecodable",
        /// The host's TLS certificate is not trusted (add its CA to `ca_file`): never the host's
        /// fault.
        TlsUntrusted => "tls_untrusted",
        /// The host proposed a mempool tx only the escrow's creator may sequence (byzantine).
        ForeignMempoolTx => "foreign_mempool_tx",
        TimestampDrift => "timestamp_drift",
        BadAuth => "bad_auth",
        NotEscrowOwner => "not_escrow_owner",
        SenderNotInGroup => "sender_not_in_group",
        EscrowNotFound => "escrow_not_found",
        NotFound => "not_found",
        SessionNotFound => "session_not_found",
        PostStateRootMismatch => "post_state_root_mismatch",
        NonceGap => "nonce_gap",
        RequestsDisabled => "requests_disabled",
        Initializing => "initializing",
        RateLimited => "rate_limited",
        Unavailable => "unavailable",
        BadRequest => "bad_request",
        HostError => "host_error",
    }
}

reasons! {
    /// Why the escrow sequenced a nonce as a diff without `MsgStartInference`.
    EmptyDiffReason {
        /// The nonce's host is withheld (ejected or diverged): it gets no work.
        HostWithheld => "host_withheld",
        /// The nonce's host refused a connection and has not answered since (`escrow/reach/mod.rs`).
        HostUnreachable => "host_unreachable",
        /// The nonce's host is catching up in another attempt (`escrow/reach/mod.rs`).
        HostCatchingUp => "host_catching_up",
        /// Every waiting request excludes the nonce's host.
        NoTaker => "no_taker",
        /// A skipped hedge's nonce.
        HedgeSkip => "hedge_skip",
        /// Pending txs sequenced before timeout votes are asked for.
        TimeoutContext => "timeout_context",
        /// Pending txs sequenced on their own.
        PendingDiff => "pending_diff",
        /// A finish marker sequenced on its own, so that its nonce settles durably without
        /// waiting for the next request.
        FinishDurable => "finish_durable",
        /// Pending txs sequenced for a host sync.
        SyncHosts => "sync_hosts",
        /// A finalize round (the first carries `MsgFinalizeRound`).
        FinalizeRound => "finalize_round",
    }
}

impl OutcomeReason {
    /// A verified invalid signature: the host ejects at once (docs/health.md §2).
    pub fn is_byzantine(self) -> bool {
        matches!(
            self,
            OutcomeReason::InvalidStateSig
                | OutcomeReason::InvalidReceipt
                | OutcomeReason::ForeignMempoolTx
        )
    }

    /// A stall (a stalled crowned winner ejects at once).
    pub fn is_stall(self) -> bool {
        self == OutcomeReason::Stalled
    }

    /// The failure never reached a host's application (nothing the host said).
    pub fn is_unreachable(self) -> bool {
        matches!(
            self,
            OutcomeReason::ConnectFailed | OutcomeReason::Transport | OutcomeReason::Timeout
        )
    }

    /// What the client is told when every host fails with this reason: the host's complaint and
    /// its cause. `None`: the outcome class decides the message.
    pub fn client_message(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            OutcomeReason::NotEscrowOwner => (
                "restricted to escrow owner",
                "the gateway's signing key is not the escrow owner",
            ),
            OutcomeReason::SenderNotInGroup => (
                "sender not in group",
                "the gateway's signing key is not in the escrow's group",
            ),
            OutcomeReason::TimestampDrift => (
                "timestamp drift",
                "the gateway's clock is off (hosts reject its timestamps)",
            ),
            OutcomeReason::BadAuth => (
                "unauthorized",
                "the hosts reject the gateway's request signatures",
            ),
            OutcomeReason::NotFound => (
                "not found",
                "the escrow's hosts do not serve devshard at this route",
            ),
            OutcomeReason::SessionNotFound => (
                "session not found",
                "the escrow's hosts do not know its session",
            ),
            OutcomeReason::EscrowNotFound => {
                ("escrow not found", "the escrow does not exist on chain")
            }
            _ => return None,
        })
    }
}

reasons! {
    /// Why an escrow was not picked for a new request (admission, `directory/pick.rs`).
    PickRefusal {
        /// An admin deactivated it.
        Deactivated => "deactivated",
        /// Draining or later (settling): no new requests.
        Draining => "draining",
        /// Within `N + 1` nonces of its serving limit.
        NonceLimit => "nonce_limit",
        /// No host of its group can be routed to.
        NoRoutableHost => "no_routable_host",
        /// Relaxed PoC: none of its hosts is kept preserved by the chain.
        NoPreservedHost => "no_preserved_host",
        /// Its balance, less what requests in flight reserved, cannot pay this request's reserve.
        OutOfBalance => "out_of_balance",
        /// Disabled by its restart budget.
        Failed => "failed",
        /// Its actor is not running (restarting).
        Unavailable => "unavailable",
    }
}

impl PickRefusal {
    /// How the client's message words it ("all escrows for model M are …").
    pub fn phrase(self) -> &'static str {
        match self {
            PickRefusal::Deactivated => "deactivated",
            PickRefusal::Draining => "draining or settling",
            PickRefusal::NonceLimit => "at their nonce limit",
            PickRefusal::NoRoutableHost => "without a routable host",
            PickRefusal::NoPreservedHost => "without a host preserved during PoC",
            PickRefusal::OutOfBalance => "out of balance",
            PickRefusal::Failed => "disabled after failing too often",
            PickRefusal::Unavailable => "restarting",
        }
    }

    /// Whether it passes by itself soon (the client may retry within seconds).
    pub fn is_transient(self) -> bool {
        matches!(self, PickRefusal::NoRoutableHost | PickRefusal::Unavailable)
    }
}

impl EmptyDiffReason {
    /// The `nonces_total` label: `withheld` (a host got no work) or `control`.
    pub fn nonce_kind(self) -> &'static str {
        match self {
            EmptyDiffReason::HostWithheld
            | EmptyDiffReason::HostUnreachable
            | EmptyDiffReason::HostCatchingUp
            | EmptyDiffReason::NoTaker => "withheld",
            _ => "control",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_are_unique_and_serialize_as_spelled() {
        let mut seen = std::collections::BTreeSet::new();
        for r in OutcomeReason::ALL {
            assert!(seen.insert(r.as_str()), "{r:?} spelled twice");
            let json = serde_json::to_string(r).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            let back: OutcomeReason = serde_json::from_str(&json).unwrap();
            assert_eq!(back, *r, "reads back as written");
        }
        let unknown = serde_json::from_str::<OutcomeReason>("\"no_such_reason\"");
        assert!(unknown.is_err_and(|e| e.to_string().contains("no_such_reason")));
        for r in EmptyDiffReason::ALL {
            assert_eq!(r.to_string(), r.as_str());
        }
    }

    #[test]
    fn only_verified_bad_signatures_and_foreign_mempool_txs_are_byzantine() {
        let byzantine: Vec<_> = OutcomeReason::ALL
            .iter()
            .filter(|r| r.is_byzantine())
            .map(|r| r.as_str())
            .collect();
        assert_eq!(
            byzantine,
            ["invalid_state_sig", "invalid_receipt", "foreign_mempool_tx"]
        );
    }
}
