//! Host reachability, one part of the escrow actor: a host that refused a connection gets no
//! nonce until it answers again, and while every host the escrow could use refuses, new
//! requests are answered at once instead of being given nonces.
//!
//! Why: a nonce is durable before any host is tried, so a grant whose attempt cannot connect
//! still leaves an open inference that only a refused-timeout vote settles, `refusal_timeout`
//! later, with one more nonce for the vote's diff. With every host refusing connections each
//! request made one (the hour-long chaos run: 4 724 `connect_failed` attempts in 50 s, then
//! minutes of votes whose tail passed its deadline). A nonce passed over as a diff without
//! inference costs only its fee.
//!
//! The rule ([`Reachability`], pure, unit-tested below):
//! - a host is **unreachable** from its first refused connection, or its first rejection of a
//!   request before any work (429, 503, a 404 route, 401/403, an unknown escrow: [`Refusal`]),
//!   until it answers (a receipt, or an attempt that ended in something else the host said). Its nonces are passed over as diffs
//!   without inference (`EmptyDiffReason::HostUnreachable`), but for one **probe** per
//!   `reach_probe_interval_ms`: a nonce granted to it as usual, so it is found again once it
//!   answers. The race of a probe that fails tries another host, as after any failure;
//! - the **gate** is closed while every host the escrow could route to is unreachable. Then a
//!   new primary request is answered at once with `EscrowError::HostsUnreachable` (503 +
//!   `Retry-After`), without a nonce, but for one probe per interval for the whole escrow.
//!   Races already waiting get the same answer when the picker finds no probe due.
//!
//! - a host **catching up** (its grant carries catch-up chunks: it lacks more than a chunk of
//!   diffs, e.g. after it restarted empty) gets no other nonce until that attempt ends or its
//!   receipt comes, while another host could take them (`EmptyDiffReason::HostCatchingUp`).
//!   Every concurrent request to it would otherwise carry its window, meet the host's nonce gap
//!   and send the whole catch-up again (the hour-long run: 46 resends of ≈ 13 000 diffs each in
//!   2.4 s to two hosts restarted empty, and answers at nonces whose roots had left memory).
//!   When every other host is catching up or unreachable, the waiting races wait for the
//!   catch-up (its receipt, or its attempt's end), up to `reach_catch_up_wait_ms`, and are then
//!   granted as before: granted at once, each met the host's nonce gap, had its resend refused
//!   and failed with no host left (the hour-long run: one host serving alone after the others
//!   diverged, 146 requests failed in 3 s and the recovery probe timed out).
//!
//! - a host that lacks more than `reach_background_catch_up_diffs` diffs (restarted empty far
//!   behind, or back from an ejection) is caught up by a **background sync**
//!   (`actor/background.rs`), never by a client's attempt: its nonces pass over it meanwhile
//!   (`EmptyDiffReason::HostCatchingUp`), and when no other host can serve, waiting races wait
//!   up to `reach_catch_up_wait_ms` and are then answered `EscrowError::HostsCatchingUp` (503 +
//!   `Retry-After`), no nonce taken. Before, the attempt that met the host's gap carried the whole
//!   catch-up: the hour-long run's clients waited 46 s and more behind catch-ups of ≈ 120 000
//!   diffs (invariant 2) and its recovery probes timed out (invariant 3).
//!
//! This is no health judgement: nobody is struck or ejected (a fault every host shares is the
//! correlation guard's business, docs/health.md §1); it only keeps nonces away from connections
//! that will fail. Nothing survives a restart: a respawned escrow takes every host as
//! reachable and its first attempts find out. Timers: none (probes are due when a nonce comes).

use std::collections::BTreeMap;

use crate::protocol::crypto::Address;

/// Every `event` label of `devshard_reach_total`.
pub const EVENTS: [&str; 16] = [
    "host_unreachable",
    "host_reachable",
    "gate_closed",
    "gate_opened",
    "probe",
    "withheld",
    "refused",
    "catching_up",
    "withheld_catching_up",
    "resend_refused",
    "resend_waiting",
    "background_started",
    "background_done",
    "background_failed",
    "refused_catching_up",
    "keep_warm",
];

/// The tunables (`[escrow] reach_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReachSettings {
    /// `false`: every host is always taken as reachable.
    pub enabled: bool,
    /// One probe per unreachable host (and one for a closed gate) per this interval (ms).
    pub probe_interval_ms: i64,
    /// How long waiting races wait for a catch-up that no other host can stand in for (ms).
    pub catch_up_wait_ms: i64,
    /// A host lacking more diffs than this is caught up in the background, never by an
    /// attempt (0: every catch-up rides an attempt).
    pub background_above: u64,
}

/// What to do with a nonce whose host a waiting race would take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceReach {
    /// The host is reachable: grant.
    Grant,
    /// The host is unreachable and this nonce is its probe: grant.
    Probe,
    /// The host is unreachable: pass the nonce over (a diff without inference).
    Withhold,
    /// The host is catching up in another attempt: pass the nonce over.
    CatchingUp,
    /// The host is catching up and no other host can take the nonce: the waiters wait.
    AwaitCatchUp,
    /// Every host is unreachable and no probe is due: answer the waiters, no nonce.
    Refuse,
    /// The host is caught up in the background, no other host can serve and the waiters waited
    /// `catch_up_wait_ms`: answer them `HostsCatchingUp`, no nonce.
    RefuseCatchingUp,
}

/// A change of the gate, to log and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateChange {
    Closed,
    /// It had been closed this long (ms).
    Opened {
        closed_ms: i64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Unreachable {
    since_ms: i64,
    next_probe_ms: i64,
    /// Its latest refusal.
    cause: Refusal,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Reachability {
    settings: ReachSettings,
    hosts: BTreeMap<Address, Unreachable>,
    /// Hosts catching up: what carries it, and since when (ms).
    catching: BTreeMap<Address, (Carrier, i64)>,
    gate_next_probe_ms: i64,
    gate_closed_since_ms: Option<i64>,
    withheld: u64,
    refused: u64,
    probes: u64,
}

impl Reachability {
    pub fn new(settings: ReachSettings) -> Reachability {
        Reachability {
            settings,
            hosts: BTreeMap::new(),
            catching: BTreeMap::new(),
            gate_next_probe_ms: 0,
            gate_closed_since_ms: None,
            withheld: 0,
            refused: 0,
            probes: 0,
        }
    }

    /// `host` refused a connection or rejected a request before any work ([`Refusal`]); `true`
    /// when it was reachable until now.
    pub fn refused(&mut self, host: &Address, cause: Refusal, now: i64) -> bool {
        if !self.settings.enabled {
            return false;
        }
        if let Some(u) = self.hosts.get_mut(host) {
            u.cause = cause;
            return false;
        }
        let next_probe_ms = now.saturating_add(self.settings.probe_interval_ms);
        self.hosts.insert(
            host.clone(),
            Unreachable {
                since_ms: now,
                next_probe_ms,
                cause,
            },
        );
        true
    }

    /// What most unreachable hosts said last (on a tie, the first label in order).
    pub fn cause(&self) -> Refusal {
        let mut counts: BTreeMap<&'static str, (usize, Refusal)> = BTreeMap::new();
        for u in self.hosts.values() {
            counts.entry(u.cause.as_str()).or_insert((0, u.cause)).0 += 1;
        }
        let mut best: Option<(usize, Refusal)> = None;
        for (n, c) in counts.into_values() {
            if best.is_none_or(|(m, _)| n > m) {
                best = Some((n, c));
            }
        }
        best.map_or(Refusal::Connect, |(_, c)| c)
    }

    /// `host` answered: reachable again. `Some(ms)`: it had been unreachable this long.
    pub fn answered(&mut self, host: &Address, now: i64) -> Option<i64> {
        self.hosts
            .remove(host)
            .map(|u| now.saturating_sub(u.since_ms))
    }

    pub fn is_unreachable(&self, host: &Address) -> bool {
        self.hosts.contains_key(host)
    }

    /// Whether the picker must ask [`Self::nonce`] about `host`.
    pub fn is_held_back(&self, host: &Address) -> bool {
        self.hosts.contains_key(host) || self.catching.contains_key(host)
    }

    /// Whether every one of `candidates` (the hosts the escrow could route to) is unreachable.
    pub fn all_unreachable(&self, candidates: &[Address]) -> bool {
        !candidates.is_empty() && candidates.iter().all(|h| self.hosts.contains_key(h))
    }

    /// Follows the gate after a change of reachability or of the candidates.
    pub fn gate(&mut self, candidates: &[Address], now: i64) -> Option<GateChange> {
        let closed = self.all_unreachable(candidates);
        match (closed, self.gate_closed_since_ms) {
            (true, None) => {
                self.gate_closed_since_ms = Some(now);
                self.gate_next_probe_ms = now.saturating_add(self.settings.probe_interval_ms);
                Some(GateChange::Closed)
            }
            (false, Some(since)) => {
                self.gate_closed_since_ms = None;
                Some(GateChange::Opened {
                    closed_ms: now.saturating_sub(since),
                })
            }
            _ => None,
        }
    }

    /// A new primary request: `false` (refused at once, counted) while the gate is closed and
    /// its probe is not due. The probe itself is taken by [`Self::nonce`].
    pub fn admit(&mut self, candidates: &[Address], now: i64) -> bool {
        if self.all_unreachable(candidates) && now < self.gate_next_probe_ms {
            self.refused = self.refused.saturating_add(1);
            return false;
        }
        true
    }

    /// What to do with the next nonce, whose host is `host`, which a waiting race would take.
    pub fn nonce(&mut self, host: &Address, candidates: &[Address], now: i64) -> NonceReach {
        if let Some((carrier, since)) = self.catching.get(host) {
            let another = self.another_can_serve(host, candidates, now);
            if another {
                self.withheld = self.withheld.saturating_add(1);
                return NonceReach::CatchingUp;
            }
            if now.saturating_sub(*since) < self.settings.catch_up_wait_ms {
                return NonceReach::AwaitCatchUp;
            }
            if *carrier == Carrier::Sync {
                return NonceReach::RefuseCatchingUp;
            }
        }
        let all = self.all_unreachable(candidates);
        let interval = self.settings.probe_interval_ms;
        let Some(u) = self.hosts.get_mut(host) else {
            return NonceReach::Grant;
        };
        if all {
            if now < self.gate_next_probe_ms {
                return NonceReach::Refuse;
            }
            self.gate_next_probe_ms = now.saturating_add(interval);
        } else if now < u.next_probe_ms {
            self.withheld = self.withheld.saturating_add(1);
            return NonceReach::Withhold;
        }
        u.next_probe_ms = now.saturating_add(interval);
        self.probes = self.probes.saturating_add(1);
        NonceReach::Probe
    }

    /// Whether `host`'s nonce, which no waiter takes, passes over it at once: it is catching up
    /// and another of `candidates` can serve (counted as withheld when so).
    pub fn pass_over_catching(&mut self, host: &Address, candidates: &[Address], now: i64) -> bool {
        let pass =
            self.catching.contains_key(host) && self.another_can_serve(host, candidates, now);
        if pass {
            self.withheld = self.withheld.saturating_add(1);
        }
        pass
    }

    /// Whether one of `candidates` other than `host` could take a request now: reachable and not
    /// catching up, or unreachable with its probe due (the nonce passing over the catching host
    /// reaches it as its probe). Waiting for a catch-up while another host's probe was due held
    /// every request after a clear until the catching host's next nonce moved (the rotating
    /// hour-long run: the recovery probe timed out with two hosts back from refusing).
    fn another_can_serve(&self, host: &Address, candidates: &[Address], now: i64) -> bool {
        candidates.iter().any(|h| {
            h != host
                && !self.catching.contains_key(h)
                && self.hosts.get(h).is_none_or(|u| now >= u.next_probe_ms)
        })
    }

    /// Waiters answered without a nonce at once (counted with [`Self::admit`]'s).
    pub fn refused_waiters(&mut self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.refused = self.refused.saturating_add(n);
    }

    /// `Retry-After` of a refused request (s): until the gate's next probe, at least 1.
    pub fn retry_after_s(&self, now: i64) -> u64 {
        let ms = self.gate_next_probe_ms.saturating_sub(now).max(1);
        u64::try_from(ms.saturating_add(999) / 1_000)
            .unwrap_or(1)
            .max(1)
    }

    pub fn unreachable_count(&self) -> usize {
        self.hosts.len()
    }
}

mod catching;
mod refusal;
mod view;

pub use refusal::Refusal;
pub use view::{Carrier, CatchingView, ReachView, RefusingView};

#[cfg(test)]
mod tests;
