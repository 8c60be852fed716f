//! Fault signatures (what makes two failures "the same") and the client's message for a shared
//! fault. Part of the correlation guard (module docs of [`super`]).

use serde::Serialize;

use crate::{outcome::OutcomeClass, policy::reason::OutcomeReason};

/// Longest normalised message kept in a signature (characters).
const MAX_MESSAGE_CHARS: usize = 200;

/// What makes two failures "the same".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FaultSignature {
    pub class: OutcomeClass,
    /// HTTP status, when the host answered.
    pub status: Option<u16>,
    /// Attribution reason (`not_escrow_owner`, `timestamp_drift`, …).
    pub reason: OutcomeReason,
    /// The host's message after [`normalise`].
    pub message: String,
}

impl FaultSignature {
    /// A signature; `raw_message` is normalised here. A connection or stream lost without an
    /// answer keeps no message: the typed reason says what happened, and what the socket layer
    /// adds (`connection refused`, `connection reset by peer`, `connector has been
    /// disconnected`) depends on whether the attempt found a pooled connection, not on the
    /// fault. Found by 10⁴ actor schedules (schedule 1175): four hosts refused connections, one
    /// attempt met a pooled connection the closing listener reset and the next a refused
    /// connect, two signatures that never matched, so the refusals were held as each host's own
    /// and the next success struck a host three times.
    pub fn new(
        class: OutcomeClass,
        status: Option<u16>,
        reason: OutcomeReason,
        raw_message: &str,
    ) -> Self {
        let message = if lost_without_answer(class, status, reason) {
            String::new()
        } else {
            normalise(raw_message)
        };
        FaultSignature {
            class,
            status,
            reason,
            message,
        }
    }

    /// A connection or stream the host lost without an answer: a refused connection, a transport
    /// error, a truncated or an empty stream.
    pub(super) fn connection_lost(&self) -> bool {
        lost_without_answer(self.class, self.status, self.reason)
    }

    /// What one host holds (a nonce gap, a lost session): its own state, which the escrow
    /// catches up, never a fault several hosts share, even when several restarted empty
    /// together. Run J (seed `long-1`, 576 s): four hosts restarted empty, two of them answered
    /// nonce gaps, the guard took the gaps for a shared fault and 30 requests got 502 while a
    /// fifth host could serve.
    pub(super) fn own_state(&self) -> bool {
        matches!(
            self.reason,
            OutcomeReason::NonceGap | OutcomeReason::SessionNotFound
        )
    }
}

/// A fault several hosts share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SharedFault<H = String> {
    pub signature: FaultSignature,
    /// Distinct hosts that returned it within the window (sorted).
    pub hosts: Vec<H>,
    /// Largest `Retry-After` the hosts gave, when the caller knows it (overload messages).
    pub retry_after_ms: Option<i64>,
}

/// A host fault with no HTTP answer whose reason is a lost connection or stream.
fn lost_without_answer(class: OutcomeClass, status: Option<u16>, reason: OutcomeReason) -> bool {
    class == OutcomeClass::HostFault
        && status.is_none()
        && matches!(
            reason,
            OutcomeReason::ConnectFailed
                | OutcomeReason::Transport
                | OutcomeReason::Truncated
                | OutcomeReason::EmptyStream
        )
}

/// Lower-cases, collapses whitespace, and replaces every token containing a digit with `#`.
pub fn normalise(message: &str) -> String {
    let words: Vec<String> = message
        .split_whitespace()
        .map(|w| {
            if w.chars().any(|c| c.is_ascii_digit()) {
                "#".to_string()
            } else {
                w.to_lowercase()
            }
        })
        .collect();
    words.join(" ").chars().take(MAX_MESSAGE_CHARS).collect()
}

/// The client's error message for a shared fault.
pub fn cause_message<H>(fault: &SharedFault<H>) -> String {
    let sig = &fault.signature;
    let retry = match fault.retry_after_ms {
        Some(ms) if ms > 0 => format!(" (retry after {} s)", ms.saturating_add(999) / 1000),
        _ => " (retry later)".to_string(),
    };
    if sig.reason.is_unreachable() {
        return "all hosts failed: unreachable — no host could be reached".to_string();
    }
    let (what, cause) = match sig.reason.client_message() {
        Some((what, cause)) => (what, cause.to_string()),
        None => match sig.class {
            OutcomeClass::Overload => (
                "overloaded",
                format!("every host is overloaded or paused{retry}"),
            ),
            OutcomeClass::Diverged => (
                "state mismatch",
                "the hosts' escrow state differs from the gateway's".to_string(),
            ),
            OutcomeClass::RequestFault => (
                "bad request",
                "the hosts reject the request itself".to_string(),
            ),
            _ => (
                "same error",
                format!("every host failed the same way{}", detail(sig)),
            ),
        },
    };
    format!("all hosts rejected the request: {what} — {cause}")
}

/// ` [status: message]` of a signature, for messages without a specific cause.
fn detail(sig: &FaultSignature) -> String {
    match (sig.status, sig.message.is_empty()) {
        (Some(s), false) => format!(" [{s}: {}]", sig.message),
        (Some(s), true) => format!(" [{s}]"),
        (None, false) => format!(" [{}]", sig.message),
        (None, true) => String::new(),
    }
}
