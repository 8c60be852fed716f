//! The timeout-vote queue, a part of the nonce book (docs/protocol.md §6.5): nonces whose
//! protocol deadline passed wait here for their vote; up to `timeout_votes_parallel` votes
//! collect at once (each asks all its verifiers in parallel, `timeouts.rs`), so the unfinished
//! nonces of a dead executor are all voted on about when their deadline passes, not one after
//! another. A vote short of quorum is asked again after a back-off (`timeout_vote_retry_ms`,
//! doubling up to `timeout_vote_retry_max_ms`) for up to `timeout_vote_rounds` rounds.
//! Pure bookkeeping: the actor runs the votes and arms the timers.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::Duration,
};

use super::config::EscrowConfig;

/// The bounds of timeout voting.
#[derive(Debug, Clone, Copy)]
pub(super) struct VoteLimits {
    pub parallel: usize,
    /// The bound while a backlog waits (more than 4 × `parallel` queued).
    pub parallel_backlog: usize,
    pub retry_ms: u64,
    pub retry_max_ms: u64,
    pub rounds: u32,
}

impl VoteLimits {
    pub(super) fn of(cfg: &EscrowConfig) -> VoteLimits {
        VoteLimits {
            parallel: cfg.timeout_votes_parallel.max(1),
            parallel_backlog: cfg
                .timeout_votes_parallel_backlog
                .max(cfg.timeout_votes_parallel.max(1)),
            retry_ms: cfg.timeout_vote_retry_ms,
            retry_max_ms: cfg.timeout_vote_retry_max_ms.max(cfg.timeout_vote_retry_ms),
            rounds: cfg.timeout_vote_rounds.max(1),
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub(super) struct VoteQueue {
    waiting: VecDeque<u64>,
    running: BTreeSet<u64>,
    /// Rounds that fell short, per nonce.
    short: BTreeMap<u64, u32>,
    /// When a verifier's return last asked the votes backing off again early (ms).
    woken_ms: Option<i64>,
    limits: VoteLimits,
}

impl VoteQueue {
    pub(super) fn new(limits: VoteLimits) -> VoteQueue {
        VoteQueue {
            waiting: VecDeque::new(),
            running: BTreeSet::new(),
            short: BTreeMap::new(),
            woken_ms: None,
            limits,
        }
    }

    /// Queues `nonce` (once; not while its vote runs).
    pub(super) fn enqueue(&mut self, nonce: u64) {
        if !self.running.contains(&nonce) && !self.waiting.contains(&nonce) {
            self.waiting.push_back(nonce);
        }
    }

    /// The next queued nonce that may start now (under the parallel bound), or `None`.
    pub(super) fn pop(&mut self) -> Option<u64> {
        if self.running.len() >= self.bound() {
            return None;
        }
        self.waiting.pop_front()
    }

    /// How many votes may collect at once: `parallel`, or `parallel_backlog` while more than
    /// 4 × `parallel` wait. A vote mostly waits on its verifiers (each challenges the executor),
    /// so a backlog of hundreds (the hour-long chaos run: ≈ 20 timeouts a second for minutes,
    /// votes at ≈ 16 a second) drains only with more of them in flight.
    fn bound(&self) -> usize {
        if self.waiting.len() > self.limits.parallel.saturating_mul(4) {
            self.limits.parallel_backlog
        } else {
            self.limits.parallel
        }
    }

    /// The vote of `nonce` starts.
    pub(super) fn start(&mut self, nonce: u64) {
        self.running.insert(nonce);
    }

    /// The vote of `nonce` is over.
    pub(super) fn done(&mut self, nonce: u64) {
        self.running.remove(&nonce);
    }

    pub(super) fn running(&self) -> usize {
        self.running.len()
    }

    /// A round of `nonce` fell short of quorum: how long to wait before the next one, or `None`
    /// when its rounds are used up.
    pub(super) fn short(&mut self, nonce: u64) -> Option<Duration> {
        let rounds = self.short.entry(nonce).or_insert(0);
        *rounds = rounds.saturating_add(1);
        if *rounds >= self.limits.rounds {
            self.short.remove(&nonce);
            return None;
        }
        Some(crate::policy::backoff::doubled(
            Duration::from_millis(self.limits.retry_ms),
            *rounds - 1,
            Duration::from_millis(self.limits.retry_max_ms),
        ))
    }

    /// Whether a round of `nonce` fell short already.
    pub(super) fn was_short(&self, nonce: u64) -> bool {
        self.short.contains_key(&nonce)
    }

    /// The nonces whose last round fell short and that wait for their back-off (neither queued
    /// nor collecting).
    pub(super) fn backing_off(&self) -> Vec<u64> {
        self.short
            .keys()
            .filter(|n| !self.running.contains(n) && !self.waiting.contains(n))
            .copied()
            .collect()
    }

    /// Whether a verifier's return may ask the votes backing off again now: at most once per
    /// `retry_ms` ([`Self::woken`] marks it), since each early round counts (a host flapping
    /// between refusing and answering would otherwise use up every round in seconds).
    pub(super) fn wake_due(&self, now_ms: i64) -> bool {
        let gap = i64::try_from(self.limits.retry_ms).unwrap_or(i64::MAX);
        self.woken_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= gap)
    }

    /// A verifier's return asked votes again at `now_ms`.
    pub(super) fn woken(&mut self, now_ms: i64) {
        self.woken_ms = Some(now_ms);
    }

    /// `nonce` is settled: forget its rounds.
    pub(super) fn forget(&mut self, nonce: u64) {
        self.short.remove(&nonce);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(parallel: usize) -> VoteLimits {
        VoteLimits {
            parallel,
            parallel_backlog: parallel,
            retry_ms: 10_000,
            retry_max_ms: 25_000,
            rounds: 4,
        }
    }

    #[test]
    fn votes_run_in_parallel_up_to_the_bound() {
        let mut q = VoteQueue::new(limits(2));
        for n in 1..=3 {
            q.enqueue(n);
        }
        q.enqueue(1);
        let a = q.pop().unwrap();
        q.start(a);
        let b = q.pop().unwrap();
        q.start(b);
        assert_eq!((a, b), (1, 2));
        assert_eq!(q.pop(), None, "bound reached");
        q.enqueue(1);
        q.done(1);
        assert_eq!(q.pop(), Some(3), "a running nonce was not queued twice");
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_backlog_raises_the_bound_until_it_drained() {
        let mut q = VoteQueue::new(VoteLimits {
            parallel_backlog: 4,
            ..limits(2)
        });
        for n in 1..=13 {
            q.enqueue(n);
        }
        for _ in 0..4 {
            let n = q.pop().unwrap();
            q.start(n);
        }
        assert_eq!(q.pop(), None, "the backlog bound");
        assert_eq!(q.running(), 4);
        for n in 1..=4 {
            q.done(n);
        }
        // 9 wait: the first starts under the backlog bound; then 8 wait, no longer more than
        // 4 × 2: the normal bound again.
        let mut started = 0;
        while let Some(n) = q.pop() {
            q.start(n);
            started += 1;
        }
        assert_eq!(started, 2, "back to 2 at once");
    }

    #[test]
    fn a_short_round_backs_off_doubling_to_the_cap_then_gives_up() {
        let mut q = VoteQueue::new(limits(1));
        let waits: Vec<_> = (0..4).map(|_| q.short(7)).collect();
        assert_eq!(
            waits,
            vec![
                Some(Duration::from_secs(10)),
                Some(Duration::from_secs(20)),
                Some(Duration::from_secs(25)),
                None
            ]
        );
        assert_eq!(
            q.short(7),
            Some(Duration::from_secs(10)),
            "given up: starts over"
        );
    }

    #[test]
    fn only_votes_waiting_for_their_back_off_are_backing_off() {
        let mut q = VoteQueue::new(limits(4));
        for n in [1, 2, 3] {
            q.short(n);
        }
        q.enqueue(2);
        q.enqueue(3);
        let n = q.pop().unwrap();
        q.start(n);
        assert_eq!(n, 2);
        assert_eq!(q.backing_off(), vec![1], "2 collects, 3 is queued");
        q.forget(1);
        assert!(q.backing_off().is_empty());
    }

    #[test]
    fn a_verifier_returning_wakes_the_votes_at_most_once_per_retry_interval() {
        let mut q = VoteQueue::new(limits(1));
        assert!(q.wake_due(0));
        q.woken(0);
        assert!(
            !q.wake_due(9_999),
            "a flapping host does not use up the rounds"
        );
        assert!(q.wake_due(10_000));
    }
}
