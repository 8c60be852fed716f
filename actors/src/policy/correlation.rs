//! The correlation guard of docs/health.md §1, per escrow: when two or more distinct hosts fail with
//! the same fault signature within `shared_fault_window_ms` and no host succeeded in between, the
//! fault is *shared* — nobody gets a strike, the fan-out stops, and the client gets a clear cause.
//!
//! Call order (what makes invariant 1 hold for the *first* host too): every failure goes to
//! [`SharedFaultDetector::record_failure`] **before** any strike. A failure that is not (yet)
//! shared is *held*, not charged. A held failure is confirmed as the host's own (and only then
//! struck and sampled) when a host of the escrow succeeds in an attempt sent after it
//! ([`SharedFaultDetector::record_success`]) or when its window passes with no other host failing the same way
//! ([`SharedFaultDetector::release_due`] at [`SharedFaultDetector::next_release`]). A failure that
//! becomes shared retracts every held failure of that signature in the window.
//!
//! Signatures compare class, status, attribution reason and the normalised host message
//! ([`normalise`] strips numbers, so `timestamp drift 45s` and `… 47s` match). Cause messages are
//! chosen on the typed reason, never on message substrings.
//!
//! **Shared outages.** A host whose refused connections were found shared is *in a shared outage*
//! until it succeeds again or the window passes ([`SharedFaultDetector::excuses`]): the streams it
//! loses meanwhile (truncated, empty, transport error) are that outage, whatever their signature,
//! and are never charged. Only the host's own lost connections are excused, so races still fan out
//! after unrelated failures of different hosts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{reason::OutcomeReason, settings::HealthSettings};
use crate::outcome::OutcomeClass;

/// Entries kept per escrow; beyond this the oldest are dropped (a dropped held failure is never
/// charged: the safe direction).
pub const MAX_ENTRIES: usize = 4096;
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
    fn connection_lost(&self) -> bool {
        lost_without_answer(self.class, self.status, self.reason)
    }

    /// What one host holds (a nonce gap, a lost session): its own state, which the escrow
    /// catches up, never a fault several hosts share, even when several restarted empty
    /// together. Run J (seed `long-1`, 576 s): four hosts restarted empty, two of them answered
    /// nonce gaps, the guard took the gaps for a shared fault and 30 requests got 502 while a
    /// fifth host could serve.
    fn own_state(&self) -> bool {
        matches!(
            self.reason,
            OutcomeReason::NonceGap | OutcomeReason::SessionNotFound
        )
    }

    /// A refused connection (what a host that is down answers).
    fn refused(&self) -> bool {
        self.class == OutcomeClass::HostFault && self.reason == OutcomeReason::ConnectFailed
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

/// A failure confirmed as its host's own: now it may be struck and sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldFault<H = String> {
    pub host: H,
    pub signature: FaultSignature,
    pub at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry<H> {
    host: H,
    signature: FaultSignature,
    at_ms: i64,
    /// Waiting for confirmation (false: part of a shared fault, never charged).
    held: bool,
}

/// The guard of one escrow (plain state; the escrow actor owns it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFaultDetector<H = String> {
    window_ms: i64,
    entries: Vec<Entry<H>>,
    last_success_ms: Option<i64>,
    /// Hosts in a shared outage: when their refused connections were last found shared.
    outages: BTreeMap<H, i64>,
}

impl<H: Clone + Ord> SharedFaultDetector<H> {
    pub fn new(settings: &HealthSettings) -> Self {
        SharedFaultDetector {
            window_ms: settings.shared_fault_window_ms.max(0),
            entries: Vec::new(),
            last_success_ms: None,
            outages: BTreeMap::new(),
        }
    }

    /// Follows a settings change.
    pub fn set_settings(&mut self, settings: &HealthSettings) {
        self.window_ms = settings.shared_fault_window_ms.max(0);
    }

    /// A failure of `host`. `Some`: the fault is shared (stop fanning out; no strikes); `None`:
    /// the failure is held until confirmed.
    pub fn record_failure(
        &mut self,
        host: H,
        signature: FaultSignature,
        now_ms: i64,
    ) -> Option<SharedFault<H>> {
        let window = self.window_ms;
        self.entries
            .retain(|e| e.held || within(window, e.at_ms, now_ms));
        let shared = !signature.own_state()
            && self.entries.iter().any(|e| {
                e.signature == signature && e.host != host && within(window, e.at_ms, now_ms)
            });
        if !shared {
            self.entries.push(Entry {
                host,
                signature,
                at_ms: now_ms,
                held: true,
            });
            if self.entries.len() > MAX_ENTRIES {
                self.entries.remove(0);
            }
            return None;
        }
        let mut hosts = vec![host.clone()];
        for e in self.entries.iter_mut() {
            if e.signature == signature && within(window, e.at_ms, now_ms) {
                e.held = false;
                hosts.push(e.host.clone());
            }
        }
        hosts.sort();
        hosts.dedup();
        self.entries.push(Entry {
            host,
            signature: signature.clone(),
            at_ms: now_ms,
            held: false,
        });
        if signature.refused() {
            self.begin_outage(&hosts, now_ms);
        }
        Some(SharedFault {
            signature,
            hosts,
            retry_after_ms: None,
        })
    }

    /// `hosts` refused connections together: each is in a shared outage, and the connections it
    /// lost within the window are retracted with it. Found by the rotating hour-long run (seed
    /// `long-1`, 38 s): four hosts refused connections together, the refusals were shared, but one
    /// host's in-flight streams broke as a truncated stream, an empty stream and a transport
    /// error, three signatures no other host had; the window confirmed them as its own fault and
    /// the three strikes ejected it.
    fn begin_outage(&mut self, hosts: &[H], now_ms: i64) {
        let window = self.window_ms;
        for h in hosts {
            self.outages.insert(h.clone(), now_ms);
        }
        for e in self.entries.iter_mut() {
            if e.held
                && e.signature.connection_lost()
                && hosts.contains(&e.host)
                && within(window, e.at_ms, now_ms)
            {
                e.held = false;
            }
        }
    }

    /// Whether a failure of `host` is part of a shared outage it is in (module docs): never held,
    /// never charged.
    pub fn excuses(&self, host: &H, signature: &FaultSignature, now_ms: i64) -> bool {
        signature.connection_lost()
            && self
                .outages
                .get(host)
                .is_some_and(|at| within(self.window_ms, *at, now_ms))
    }

    /// Whether this failure is still waiting for confirmation (false once it was found shared,
    /// part of a shared outage, confirmed or dropped).
    pub fn still_held(&self, host: &H, at_ms: i64, signature: &FaultSignature) -> bool {
        self.entries
            .iter()
            .any(|e| e.held && e.host == *host && e.at_ms == at_ms && e.signature == *signature)
    }

    /// A success of any host of the escrow, whose attempt was sent at `sent_ms`: correlation is
    /// broken for the failures up to when it was sent, which are confirmed (held) or forgotten.
    /// A failure after `sent_ms` stays: a stream that was already flowing when another host
    /// failed does not show that its host still takes work. Found by the chaos runner (seed
    /// `14728273872760105528`, 84 s): every host went down within 50 ms; the first one's lost
    /// streams and refusal were held, a stream of the second, sent 200 ms before, finished
    /// 13 ms before that host refused too, and confirmed them as three strikes. The host that
    /// succeeded is out of its shared outage.
    pub fn record_success(&mut self, host: &H, sent_ms: i64, now_ms: i64) -> Vec<HeldFault<H>> {
        self.outages.remove(host);
        self.last_success_ms = Some(self.last_success_ms.map_or(now_ms, |t| t.max(now_ms)));
        let (before, after): (Vec<_>, Vec<_>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| e.at_ms <= sent_ms);
        self.entries = after;
        before
            .into_iter()
            .filter(|e| e.held)
            .map(|e| HeldFault {
                host: e.host,
                signature: e.signature,
                at_ms: e.at_ms,
            })
            .collect()
    }

    /// Confirms held failures whose window has passed unmatched (and forgets stale entries).
    pub fn release_due(&mut self, now_ms: i64) -> Vec<HeldFault<H>> {
        let window = self.window_ms;
        self.outages
            .retain(|_, at| now_ms.saturating_sub(*at) <= window);
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| now_ms.saturating_sub(e.at_ms) > window);
        self.entries = keep;
        due.into_iter()
            .filter(|e| e.held)
            .map(|e| HeldFault {
                host: e.host,
                signature: e.signature,
                at_ms: e.at_ms,
            })
            .collect()
    }

    /// When [`Self::release_due`] has something to confirm next.
    pub fn next_release(&self) -> Option<i64> {
        self.entries
            .iter()
            .filter(|e| e.held)
            .map(|e| e.at_ms.saturating_add(self.window_ms).saturating_add(1))
            .min()
    }

    /// Failures waiting for confirmation.
    pub fn held(&self) -> usize {
        self.entries.iter().filter(|e| e.held).count()
    }

    /// The latest success seen.
    pub fn last_success_ms(&self) -> Option<i64> {
        self.last_success_ms
    }
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

/// Whether `at_ms` is within `window_ms` of `now_ms` (either side).
fn within(window_ms: i64, at_ms: i64, now_ms: i64) -> bool {
    now_ms.saturating_sub(at_ms).saturating_abs() <= window_ms
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
