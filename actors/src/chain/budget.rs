//! The per-host request budget and back-off gate shared by every poller (docs/health.md §7, invariant
//! 10). Hosts are keyed by URL authority (`host:port`): the public API host has its gate, each
//! miner host its own, and a miner that is also the public API shares one.
//!
//! The budget is a sliding window: a request may be sent at `t` only if fewer than
//! `requests_per_minute` requests to that host were sent in `(t - 60 s - margin, t]`, so no 60 s
//! window ever holds more, whatever the intervals. The margin absorbs the difference between our
//! send time and the server's arrival time.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard},
};

use serde::Serialize;

use super::{
    backoff::{Backoff, BackoffPolicy, RetryAfter},
    settings::ChainPollSettings,
};

/// Length of the budget's window.
pub const BUDGET_WINDOW_MS: i64 = 60_000;
/// Extra window length so that arrival jitter cannot squeeze N+1 requests into a server's 60 s.
pub const BUDGET_MARGIN_MS: i64 = 1_000;

/// Sliding-window request budget of one host.
#[derive(Debug, Clone, Default)]
pub struct RequestBudget {
    sent: VecDeque<i64>,
}

impl RequestBudget {
    fn window() -> i64 {
        BUDGET_WINDOW_MS + BUDGET_MARGIN_MS
    }

    fn prune(&mut self, now_ms: i64) {
        while self
            .sent
            .front()
            .is_some_and(|&t| t <= now_ms - Self::window())
        {
            self.sent.pop_front();
        }
    }

    /// Earliest time ≥ `now_ms` at which one more request fits under `per_minute`.
    pub fn ready_at(&mut self, now_ms: i64, per_minute: u32) -> i64 {
        self.prune(now_ms);
        let cap = per_minute.max(1) as usize;
        if self.sent.len() < cap {
            return now_ms;
        }
        // The oldest request that must leave the window before one more fits.
        let idx = self.sent.len() - cap;
        self.sent
            .get(idx)
            .map_or(now_ms, |&t| (t + Self::window()).max(now_ms))
    }

    /// Records a request sent at `now_ms`.
    pub fn record(&mut self, now_ms: i64) {
        self.sent.push_back(now_ms);
    }

    /// Requests in the window ending at `now_ms`.
    pub fn in_window(&mut self, now_ms: i64) -> usize {
        self.prune(now_ms);
        self.sent.len()
    }
}

/// Why a request has to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// The host's budget is spent for the current window.
    Budget,
    /// A 429/503 back-off (or `Retry-After`) deadline.
    Backoff,
}

impl WaitReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Budget => "budget",
            WaitReason::Backoff => "backoff",
        }
    }
}

/// A request may not go before `until_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferred {
    pub until_ms: i64,
    pub reason: WaitReason,
}

/// One host's gate.
#[derive(Debug, Clone, Default)]
struct HostGate {
    budget: RequestBudget,
    backoff: Backoff,
    sent_total: u64,
}

/// Debug view of one host's gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostGateView {
    /// URL authority (`host:port`).
    pub host: String,
    pub requests_last_minute: usize,
    pub budget_per_minute: u32,
    pub sent_total: u64,
    /// Unix ms before which nothing is sent (0 when not backing off).
    pub backoff_until_ms: i64,
    pub backoff_remaining_ms: i64,
    pub backoff_level: u32,
    pub last_backoff_ms: i64,
    pub last_backoff_from_retry_after: bool,
}

#[derive(Debug)]
struct Gates {
    per_minute: u32,
    policy: BackoffPolicy,
    hosts: BTreeMap<String, HostGate>,
}

/// Budget and back-off state per host, shared by every poller (cheap to clone).
#[derive(Debug, Clone)]
pub struct HostGates(Arc<Mutex<Gates>>);

impl HostGates {
    /// Gates with the budget and back-off policy of `settings`.
    pub fn new(settings: &ChainPollSettings) -> HostGates {
        HostGates(Arc::new(Mutex::new(Gates {
            per_minute: settings.public_api_requests_per_minute,
            policy: policy(settings),
            hosts: BTreeMap::new(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Gates> {
        // The data stays consistent even if a holder panicked: every update is one assignment.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies new settings (budget and back-off policy); existing deadlines stay.
    pub fn apply(&self, settings: &ChainPollSettings) {
        let mut g = self.lock();
        g.per_minute = settings.public_api_requests_per_minute;
        g.policy = policy(settings);
    }

    /// Takes one request slot for `host` at `now_ms`, or says until when to wait.
    pub fn acquire(&self, host: &str, now_ms: i64) -> Result<(), Deferred> {
        let mut g = self.lock();
        let per_minute = g.per_minute;
        let gate = g.hosts.entry(host.to_owned()).or_default();
        if gate.backoff.until_ms > now_ms {
            return Err(Deferred {
                until_ms: gate.backoff.until_ms,
                reason: WaitReason::Backoff,
            });
        }
        let ready = gate.budget.ready_at(now_ms, per_minute);
        if ready > now_ms {
            return Err(Deferred {
                until_ms: ready,
                reason: WaitReason::Budget,
            });
        }
        gate.budget.record(now_ms);
        gate.sent_total += 1;
        Ok(())
    }

    /// When `host` could take a request, at the earliest (`now_ms` if right away).
    pub fn ready_at(&self, host: &str, now_ms: i64) -> i64 {
        let mut g = self.lock();
        let per_minute = g.per_minute;
        let Some(gate) = g.hosts.get_mut(host) else {
            return now_ms;
        };
        gate.budget
            .ready_at(now_ms, per_minute)
            .max(gate.backoff.until_ms)
    }

    /// `host` answered 429/503 at `now_ms`; returns the back-off deadline.
    pub fn throttled(&self, host: &str, now_ms: i64, retry_after: Option<RetryAfter>) -> i64 {
        let mut g = self.lock();
        let policy = g.policy;
        let gate = g.hosts.entry(host.to_owned()).or_default();
        gate.backoff.throttled(now_ms, retry_after, policy)
    }

    /// `host` answered something other than 429/503 (success or another failure).
    pub fn answered(&self, host: &str) {
        if let Some(gate) = self.lock().hosts.get_mut(host) {
            gate.backoff.answered();
        }
    }

    /// Remaining back-off of `host` at `now_ms`, ms.
    pub fn backoff_remaining_ms(&self, host: &str, now_ms: i64) -> i64 {
        self.lock()
            .hosts
            .get(host)
            .map_or(0, |g| g.backoff.remaining_ms(now_ms))
    }

    /// Unix ms before which nothing may be sent to `host` (0 without a back-off).
    pub fn backoff_until(&self, host: &str) -> i64 {
        self.lock()
            .hosts
            .get(host)
            .map_or(0, |g| g.backoff.until_ms)
    }

    /// Views of the given hosts (those that have a gate).
    pub fn view<'a>(
        &self,
        hosts: impl IntoIterator<Item = &'a str>,
        now_ms: i64,
    ) -> Vec<HostGateView> {
        let mut g = self.lock();
        let per_minute = g.per_minute;
        let mut out = Vec::new();
        for host in hosts {
            let Some(gate) = g.hosts.get_mut(host) else {
                continue;
            };
            out.push(HostGateView {
                host: host.to_owned(),
                requests_last_minute: gate.budget.in_window(now_ms),
                budget_per_minute: per_minute,
                sent_total: gate.sent_total,
                backoff_until_ms: gate.backoff.until_ms,
                backoff_remaining_ms: gate.backoff.remaining_ms(now_ms),
                backoff_level: gate.backoff.level,
                last_backoff_ms: gate.backoff.last_delay_ms,
                last_backoff_from_retry_after: gate.backoff.from_retry_after,
            });
        }
        out
    }
}

fn policy(s: &ChainPollSettings) -> BackoffPolicy {
    BackoffPolicy {
        initial_ms: s.backoff_initial_ms,
        max_ms: s.backoff_max_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_more_than_n_in_any_window() {
        let gates = HostGates::new(&ChainPollSettings::default());
        let mut sent = Vec::new();
        // A caller that asks every 100 ms for 10 minutes.
        for t in (0..600_000).step_by(100) {
            if gates.acquire("api:80", t).is_ok() {
                sent.push(t);
            }
        }
        for (i, &t) in sent.iter().enumerate() {
            let in_window = sent[i..].iter().take_while(|&&u| u < t + 60_000).count();
            assert!(in_window <= 6, "{in_window} requests from {t}");
        }
        assert_eq!(sent.len(), 60, "6 per 61 s over 600 s");
        // Another host has its own budget.
        assert!(gates.acquire("miner:80", 0).is_ok());
    }

    #[test]
    fn backoff_blocks_the_host_for_every_caller() {
        let gates = HostGates::new(&ChainPollSettings::default());
        assert!(gates.acquire("h", 0).is_ok());
        assert_eq!(
            gates.throttled("h", 10, Some(RetryAfter::Seconds(120))),
            120_010
        );
        let d = gates.acquire("h", 60_000).unwrap_err();
        assert_eq!((d.until_ms, d.reason), (120_010, WaitReason::Backoff));
        assert_eq!(gates.ready_at("h", 60_000), 120_010);
        assert!(gates.acquire("h", 120_010).is_ok());
        let v = gates.view(["h"], 120_010);
        assert_eq!(v[0].sent_total, 2);
        assert_eq!(v[0].backoff_level, 1);
        gates.answered("h");
        assert_eq!(gates.view(["h"], 120_010)[0].backoff_level, 0);
    }
}
