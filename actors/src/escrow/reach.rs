//! The reachability gate, one part of the escrow actor: while the escrow's hosts refuse
//! connections and none has answered since, new requests are not given nonces.
//!
//! Why: a nonce is durable before any host is tried, so a grant whose attempt cannot connect
//! still leaves an open inference that only a refused-timeout vote can settle,
//! `refusal_timeout` later. With every host refusing connections each request made one (the
//! hour-long chaos run: 4 724 `connect_failed` attempts in 50 s, then minutes of votes whose
//! tail passed its deadline).
//!
//! The rule ([`ReachGate`], pure, unit-tested below):
//! - it **closes** when at least `threshold` distinct hosts refused a connection within
//!   `reach_window_ms` and no host answered since. The threshold is a majority of the escrow's
//!   distinct hosts, at least 2, and at most the routable ones (two refusing hosts of five do
//!   not close it: the others answer, and each answer opens the gate);
//! - it **opens** at the first answer of any host (a receipt, or an attempt that ended in
//!   something a host said);
//! - while closed, one primary request every `reach_probe_interval_ms` is let through as a
//!   probe: it takes a nonce and tries the hosts as usual. Every other primary request is
//!   answered at once with `EscrowError::HostsUnreachable` (503 + `Retry-After`), without a
//!   nonce. Retries, hedges and pairs of races already admitted are not gated: the correlation
//!   guard stops their fan-out when the fault is shared.
//!
//! Nothing survives a restart: a respawned escrow starts open and its first requests find out.
//! Timers: none (the probe interval is checked when a request arrives).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::protocol::crypto::Address;

/// Every `event` label of `devshard_reach_gate_total`.
pub const EVENTS: [&str; 4] = ["closed", "opened", "probe", "refused"];

/// The gate's tunables (`[escrow] reach_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReachSettings {
    /// `false`: never closes.
    pub enabled: bool,
    /// Refused connections of distinct hosts count together within this window (ms).
    pub window_ms: i64,
    /// While closed, one probe request per this interval (ms).
    pub probe_interval_ms: i64,
}

/// What the gate says to a new primary request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Open: grant as usual.
    Admit,
    /// Closed, and this request is the probe of its interval.
    Probe,
    /// Closed: answer at once, no nonce.
    Refuse,
}

/// A change of the gate's state, to log and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// These hosts refused connections within the window and none answered since.
    Closed { hosts: usize },
    /// A host answered after the gate had been closed this long (ms).
    Opened { closed_ms: i64 },
}

/// The gate's state, as the escrow's snapshot shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReachView {
    /// Closed since (unix ms), or `None` when open.
    pub closed_since_ms: Option<i64>,
    /// Hosts that refused a connection since the last answer.
    pub refusing: usize,
    /// Requests answered without a nonce while closed, and probes let through (this actor's
    /// life).
    pub refused: u64,
    pub probes: u64,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct ReachGate {
    settings: ReachSettings,
    /// The last refused connection of each host since the last answer.
    refusing: BTreeMap<Address, i64>,
    closed_since_ms: Option<i64>,
    next_probe_ms: i64,
    refused: u64,
    probes: u64,
}

/// How many distinct hosts must refuse for the gate to close: a majority of the escrow's
/// `distinct` hosts, at most its `routable` ones, and at least 2.
pub fn threshold(distinct: usize, routable: usize) -> usize {
    (distinct / 2 + 1).min(routable).max(2)
}

impl ReachGate {
    pub fn new(settings: ReachSettings) -> ReachGate {
        ReachGate {
            settings,
            refusing: BTreeMap::new(),
            closed_since_ms: None,
            next_probe_ms: 0,
            refused: 0,
            probes: 0,
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed_since_ms.is_some()
    }

    /// `host` refused a connection at `now`; `threshold` from [`threshold`].
    pub fn connect_refused(
        &mut self,
        host: &Address,
        threshold: usize,
        now: i64,
    ) -> Option<Change> {
        self.refusing.insert(host.clone(), now);
        if !self.settings.enabled || self.is_closed() {
            return None;
        }
        let window = self.settings.window_ms;
        let recent = self
            .refusing
            .values()
            .filter(|at| now.saturating_sub(**at) <= window)
            .count();
        if recent < threshold {
            return None;
        }
        self.closed_since_ms = Some(now);
        self.next_probe_ms = now.saturating_add(self.settings.probe_interval_ms);
        Some(Change::Closed { hosts: recent })
    }

    /// Some host answered at `now`: the gate opens.
    pub fn answered(&mut self, now: i64) -> Option<Change> {
        self.refusing.clear();
        let since = self.closed_since_ms.take()?;
        Some(Change::Opened {
            closed_ms: now.saturating_sub(since),
        })
    }

    /// What a new primary request gets at `now`.
    pub fn admit(&mut self, now: i64) -> Admission {
        if !self.is_closed() {
            return Admission::Admit;
        }
        if now >= self.next_probe_ms {
            self.next_probe_ms = now.saturating_add(self.settings.probe_interval_ms);
            self.probes = self.probes.saturating_add(1);
            return Admission::Probe;
        }
        self.refused = self.refused.saturating_add(1);
        Admission::Refuse
    }

    /// `Retry-After` for a refused request (ms): the next probe's time, at least a second (the
    /// header's unit).
    pub fn retry_after_ms(&self, now: i64) -> i64 {
        self.next_probe_ms.saturating_sub(now).max(1_000)
    }

    pub fn view(&self) -> ReachView {
        ReachView {
            closed_since_ms: self.closed_since_ms,
            refusing: self.refusing.len(),
            refused: self.refused,
            probes: self.probes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(i: u8) -> Address {
        Address::unchecked(format!("gonka1host{i}"))
    }

    fn gate() -> ReachGate {
        ReachGate::new(ReachSettings {
            enabled: true,
            window_ms: 1_000,
            probe_interval_ms: 250,
        })
    }

    #[test]
    fn the_threshold_is_a_majority_of_the_hosts_at_most_the_routable_ones_and_at_least_two() {
        assert_eq!(threshold(5, 5), 3);
        assert_eq!(threshold(5, 2), 2);
        assert_eq!(threshold(5, 0), 2);
        assert_eq!(threshold(2, 2), 2);
        assert_eq!(threshold(7, 7), 4);
        assert_eq!(threshold(1, 1), 2);
    }

    #[test]
    fn refusals_of_a_majority_within_the_window_close_it_and_an_answer_opens_it() {
        let mut g = gate();
        assert_eq!(g.connect_refused(&host(1), 3, 0), None);
        assert_eq!(
            g.connect_refused(&host(1), 3, 10),
            None,
            "the same host twice"
        );
        assert_eq!(g.connect_refused(&host(2), 3, 20), None);
        assert_eq!(g.admit(30), Admission::Admit);
        assert_eq!(
            g.connect_refused(&host(3), 3, 40),
            Some(Change::Closed { hosts: 3 })
        );
        assert!(g.is_closed());
        assert_eq!(g.view().refusing, 3);
        assert_eq!(g.answered(540), Some(Change::Opened { closed_ms: 500 }));
        assert!(!g.is_closed());
        assert_eq!(g.view().refusing, 0);
        assert_eq!(g.answered(600), None, "already open");
    }

    #[test]
    fn refusals_further_apart_than_the_window_or_split_by_an_answer_do_not_close_it() {
        let mut g = gate();
        g.connect_refused(&host(1), 2, 0);
        assert_eq!(g.connect_refused(&host(2), 2, 1_001), None);
        let mut g = gate();
        g.connect_refused(&host(1), 2, 0);
        g.answered(5);
        assert_eq!(g.connect_refused(&host(2), 2, 10), None);
        assert!(!g.is_closed());
    }

    #[test]
    fn while_closed_one_probe_per_interval_passes_and_the_rest_are_refused() {
        let mut g = gate();
        g.connect_refused(&host(1), 2, 0);
        g.connect_refused(&host(2), 2, 0);
        assert_eq!(g.admit(1), Admission::Refuse);
        assert_eq!(g.retry_after_ms(1), 1_000);
        assert_eq!(g.admit(249), Admission::Refuse);
        assert_eq!(g.admit(250), Admission::Probe);
        assert_eq!(g.admit(251), Admission::Refuse);
        assert_eq!(g.admit(499), Admission::Refuse);
        assert_eq!(g.admit(500), Admission::Probe);
        // A probe that fails keeps it closed; more refusals do not move the next probe.
        assert_eq!(g.connect_refused(&host(3), 2, 510), None);
        assert_eq!(g.admit(750), Admission::Probe);
        let v = g.view();
        assert_eq!((v.refused, v.probes, v.closed_since_ms), (4, 3, Some(0)));
    }

    #[test]
    fn a_disabled_gate_never_closes() {
        let mut g = ReachGate::new(ReachSettings {
            enabled: false,
            window_ms: 1_000,
            probe_interval_ms: 250,
        });
        for i in 0..5 {
            g.connect_refused(&host(i), 2, 0);
        }
        assert_eq!(g.admit(1), Admission::Admit);
    }
}
