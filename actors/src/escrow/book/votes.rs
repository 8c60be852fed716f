//! The nonce book's timeout votes: the queue (`vote_queue.rs`), the vote of each nonce, its
//! back-off after a round short of quorum and the early asks (`hasten_short_votes`).

use std::time::Duration;

use super::{NextTimeout, NonceBook};
use crate::escrow::nonces::NonceState;

impl NonceBook {
    /// Queues a timeout vote for `nonce` (once; not while its vote runs).
    pub(in crate::escrow) fn enqueue_timeout(&mut self, nonce: u64) {
        self.votes.enqueue(nonce);
    }

    /// The next timeout vote to run, while fewer than `timeout_votes_parallel` run.
    pub(in crate::escrow) fn next_timeout(
        &mut self,
        is_finished: impl Fn(u64) -> bool,
    ) -> NextTimeout {
        while let Some(nonce) = self.votes.pop() {
            if is_finished(nonce) {
                return NextTimeout::FinishedLate(nonce);
            }
            if self.attempts.contains_key(&nonce) {
                self.votes.start(nonce);
                return NextTimeout::Vote(nonce);
            }
        }
        NextTimeout::Idle
    }

    /// The vote of `nonce` is over.
    pub(in crate::escrow) fn vote_done(&mut self, nonce: u64) {
        self.votes.done(nonce);
    }

    /// Whether a vote of `nonce` already fell short (its deadline is the back-off's).
    pub(in crate::escrow) fn retried(&self, nonce: u64) -> bool {
        self.votes.was_short(nonce)
    }

    /// Moves the timeout deadline of an awaiting nonce (its record's own deadline).
    pub(in crate::escrow) fn set_deadline(&mut self, nonce: u64, at_ms: i64) {
        if let Some(NonceState::AwaitingTimeout { deadline_ms, .. }) =
            self.attempts.get_mut(&nonce).map(|e| &mut e.state)
        {
            *deadline_ms = at_ms;
        }
    }

    /// Timeout votes collecting now.
    pub(in crate::escrow) fn votes_running(&self) -> usize {
        self.votes.running()
    }

    /// A vote of `nonce` fell short of quorum: `Some(wait)` when it is asked again after
    /// `wait` (its deadline moves there), `None` when its rounds are used up.
    pub(in crate::escrow) fn vote_short(&mut self, nonce: u64, now_ms: i64) -> Option<Duration> {
        let wait = self.votes.short(nonce)?;
        if let Some(NonceState::AwaitingTimeout { deadline_ms, .. }) =
            self.attempts.get_mut(&nonce).map(|e| &mut e.state)
        {
            let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
            *deadline_ms = now_ms.saturating_add(ms);
        }
        Some(wait)
    }

    /// Votes short of quorum waiting for a back-off that ends later than `now_ms + within_ms`
    /// are asked again by then: their deadlines move, and the caller re-arms the timers of the
    /// nonces returned.
    pub(in crate::escrow) fn hasten_short_votes(
        &mut self,
        now_ms: i64,
        within_ms: i64,
    ) -> Vec<u64> {
        let by = now_ms.saturating_add(within_ms);
        let mut moved = Vec::new();
        for nonce in self.votes.backing_off() {
            if let Some(NonceState::AwaitingTimeout { deadline_ms, .. }) =
                self.attempts.get_mut(&nonce).map(|e| &mut e.state)
            {
                if *deadline_ms > by {
                    *deadline_ms = by;
                    moved.push(nonce);
                }
            }
        }
        moved
    }

    /// The vote queue's wake limit for a verifier's return (`VoteQueue::wake_due`, `woken`).
    pub(in crate::escrow) fn vote_wake_due(&self, now_ms: i64) -> bool {
        self.votes.wake_due(now_ms)
    }

    pub(in crate::escrow) fn votes_woken(&mut self, now_ms: i64) {
        self.votes.woken(now_ms);
    }
}
