//! The nonce book, one part of the escrow actor (docs/protocol.md §6.5, docs/health.md §5): every nonce
//! the escrow handed out until it is settled ([`NonceEntry`]: sent, receipt, ended, pending finish,
//! awaiting a timeout), the per-nonce timers (finish reconciliation poll or timeout deadline) and
//! the queue of timeout votes (`vote_queue.rs`: several nonces at once, bounded, retried when
//! short of quorum). A nonce's timeout reason and deadline follow its record in our state.

mod payloads;
mod votes;

use std::{collections::BTreeMap, time::Duration};

use slog::{info, Logger};

use super::{
    nonces::{NonceEntry, NonceState},
    vote_queue::{VoteLimits, VoteQueue},
};
use crate::{
    outcome::{AttemptOutcome, AttemptTimings, OutcomeClass},
    policy::reason::OutcomeReason,
    protocol::{crypto::Address, proto::TimeoutReason, state::InferenceStatus},
    stats::timers::Timer,
};

/// The protocol deadlines of this escrow (immutable for its lifetime).
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadlines {
    pub refusal_timeout_s: i64,
    pub execution_timeout_s: i64,
    /// `TimeoutBuffer`, added before a timeout vote.
    pub buffer_ms: i64,
}

/// An attempt whose one outcome is due now.
pub(super) struct Settled {
    pub participant: Address,
    pub outcome: AttemptOutcome,
    pub winner: bool,
    pub request_id: String,
}

/// What the timeout queue asks for next.
pub(super) enum NextTimeout {
    /// The nonce finished meanwhile: settle it as a late success.
    FinishedLate(u64),
    /// Collect timeout votes for this nonce (it counts against the parallel bound until
    /// [`NonceBook::vote_done`]).
    Vote(u64),
    /// Nothing to do now.
    Idle,
}

/// See the module docs.
pub(super) struct NonceBook {
    /// Every nonce we handed out that is not settled yet.
    attempts: BTreeMap<u64, NonceEntry>,
    /// Timers per nonce (finish reconciliation or timeout deadline).
    timers: BTreeMap<u64, Timer>,
    /// Nonces waiting for, or collecting, their timeout vote.
    votes: VoteQueue,
    /// Nonces whose refused-timeout payload is persisted (`actor/payloads.rs`).
    payloads: payloads::Payloads,
    deadlines: Deadlines,
    log: Logger,
}

impl NonceBook {
    pub(super) fn new(deadlines: Deadlines, limits: VoteLimits, log: Logger) -> NonceBook {
        NonceBook {
            attempts: BTreeMap::new(),
            timers: BTreeMap::new(),
            votes: VoteQueue::new(limits),
            payloads: payloads::Payloads::default(),
            deadlines,
            log,
        }
    }

    /// Registers a handed-out nonce (a grant, a ghost, or an orphan restored from the log).
    pub(super) fn insert(&mut self, entry: NonceEntry) {
        self.attempts.insert(entry.nonce, entry);
    }

    pub(super) fn nonces(&self) -> Vec<u64> {
        self.attempts.keys().copied().collect()
    }

    pub(super) fn len(&self) -> usize {
        self.attempts.len()
    }

    /// The entry of an unsettled nonce (read-only).
    pub(super) fn entry(&self, nonce: u64) -> Option<&NonceEntry> {
        self.attempts.get(&nonce)
    }

    /// The nonce's protocol deadline for a timeout, and its reason.
    pub(super) fn deadline(&self, entry: &NonceEntry, buffer_ms: i64) -> (i64, TimeoutReason) {
        let d = self.deadlines;
        entry.timeout_deadline(d.refusal_timeout_s, d.execution_timeout_s, buffer_ms)
    }

    /// The buffered protocol deadline of a ghost inference started at `started_at`.
    pub(super) fn ghost_deadline_ms(&self, started_at: i64) -> i64 {
        started_at
            .saturating_add(self.deadlines.refusal_timeout_s)
            .saturating_mul(1000)
            .saturating_add(self.deadlines.buffer_ms)
    }

    /// The executor's receipt time of an inference (from its receipt).
    pub(super) fn confirm(&mut self, nonce: u64, confirmed_at: Option<i64>) {
        if let Some(entry) = self.attempts.get_mut(&nonce) {
            entry.confirmed_at = confirmed_at;
        }
    }

    /// The race reported the end of an attempt. `false` when the nonce is not unsettled.
    pub(super) fn ended(&mut self, nonce: u64, timings: AttemptTimings, crowned: bool) -> bool {
        let Some(entry) = self.attempts.get_mut(&nonce) else {
            return false;
        };
        entry.timings = timings;
        entry.crowned = crowned;
        entry.race_id = None;
        true
    }

    /// The whole answer was delivered without a finish marker: reconciliation polls start.
    pub(super) fn pending_finish(&mut self, nonce: u64, now_ms: i64, first_poll_ms: u64) {
        if let Some(entry) = self.attempts.get_mut(&nonce) {
            entry.state = NonceState::PendingFinish {
                ended_ms: now_ms,
                next_poll_ms: first_poll_ms,
            };
        }
    }

    /// A granted nonce nobody will send: it is settled by a timeout vote, without an outcome.
    /// `true` when it was still in flight.
    pub(super) fn unclaimed(&mut self, nonce: u64) -> bool {
        match self.attempts.get_mut(&nonce) {
            Some(entry) if entry.is_in_flight() => {
                entry.emitted = true;
                entry.race_id = None;
                true
            }
            _ => false,
        }
    }

    /// Puts a failed, unfinished attempt on the timeout path. `true` when its timer must be armed.
    pub(super) fn await_timeout(&mut self, nonce: u64, reason: OutcomeReason, now_ms: i64) -> bool {
        let d = self.deadlines;
        let Some(entry) = self.attempts.get_mut(&nonce) else {
            return false;
        };
        let (deadline_ms, kind) =
            entry.timeout_deadline(d.refusal_timeout_s, d.execution_timeout_s, d.buffer_ms);
        entry.state = NonceState::AwaitingTimeout {
            deadline_ms,
            reason,
        };
        info!(self.log, "timeout scheduled"; "stage" => "timeout_scheduled", "nonce" => nonce,
            "reason" => kind.as_wire(), "remaining_ms" => deadline_ms.saturating_sub(now_ms));
        true
    }

    /// The one outcome of `nonce`, unless it was emitted already (then marks it emitted).
    pub(super) fn take_outcome(
        &mut self,
        escrow_id: &str,
        nonce: u64,
        class: OutcomeClass,
        reason: OutcomeReason,
        finish_late_ms: Option<i64>,
    ) -> Option<Settled> {
        let entry = self.attempts.get_mut(&nonce)?;
        if entry.emitted {
            return None;
        }
        entry.emitted = true;
        Some(Settled {
            participant: entry.host.clone(),
            winner: entry.crowned,
            request_id: entry.request_id.clone(),
            outcome: AttemptOutcome {
                escrow_id: escrow_id.to_string(),
                nonce,
                class,
                reason,
                timings: entry.timings,
                finish_late_ms,
            },
        })
    }

    /// Drops a settled nonce (its timer, if any, fires into nothing).
    pub(super) fn forget(&mut self, nonce: u64) {
        self.attempts.remove(&nonce);
        self.votes.forget(nonce);
        self.payloads.release(nonce);
    }

    /// Drops a nonce timed out by vote; its persisted payload stays until the timeout is
    /// durable (`book/payloads.rs`).
    pub(super) fn forget_timed_out(&mut self, nonce: u64) {
        self.attempts.remove(&nonce);
        self.votes.forget(nonce);
        self.payloads.hold_until_durable(nonce);
    }

    /// Records that `nonce`'s payload is persisted; `false` when it was already.
    pub(super) fn keep_payload(&mut self, nonce: u64) -> bool {
        self.attempts.contains_key(&nonce) && self.payloads.keep(nonce)
    }

    /// Settled nonces whose persisted payload is to be deleted: those that settled otherwise,
    /// and those timed out by vote whose timeout is durable (`sequenced`: the state no longer
    /// has the nonce pending or started; `escrow_nonce` and `durable_nonce` now).
    pub(super) fn take_released_payloads(
        &mut self,
        sequenced: impl Fn(u64) -> bool,
        escrow_nonce: u64,
        durable_nonce: u64,
    ) -> Vec<u64> {
        self.payloads
            .release_durable(sequenced, escrow_nonce, durable_nonce);
        self.payloads.take_released()
    }

    /// A nonce whose finish marker the diff at `durable_at` sequences: kept until that diff is
    /// durable ([`NonceBook::durable_finishes`]). `false` when the nonce is not unsettled or was
    /// marked already.
    pub(super) fn finished(&mut self, nonce: u64, durable_at: u64) -> bool {
        match self.attempts.get_mut(&nonce) {
            Some(entry) if !matches!(entry.state, NonceState::Finished { .. }) => {
                entry.state = NonceState::Finished { durable_at };
                entry.race_id = None;
                true
            }
            _ => false,
        }
    }

    /// Drops the finished nonces whose finish is durable now (every diff up to `durable_nonce`
    /// is); returns their timers, to cancel.
    pub(super) fn durable_finishes(&mut self, durable_nonce: u64) -> Vec<Timer> {
        let done: Vec<u64> = self
            .attempts
            .values()
            .filter(|e| {
                matches!(e.state, NonceState::Finished { durable_at } if durable_at <= durable_nonce)
            })
            .map(|e| e.nonce)
            .collect();
        let mut timers = Vec::new();
        for nonce in done {
            self.forget(nonce);
            timers.extend(self.timers.remove(&nonce));
        }
        timers
    }

    /// How long until the nonce's timer fires, by its state (`None`: no timer for it).
    pub(super) fn timer_delay(&self, nonce: u64, now_ms: i64) -> Option<Duration> {
        let entry = self.attempts.get(&nonce)?;
        let until = |at: i64| u64::try_from(at.saturating_sub(now_ms)).unwrap_or(0);
        match &entry.state {
            NonceState::InFlight | NonceState::Finished { .. } => None,
            NonceState::PendingFinish { next_poll_ms, .. } => {
                // Poll at the back-off interval, but never past the execution deadline.
                let (deadline, _) = self.deadline(entry, self.deadlines.buffer_ms);
                Some(Duration::from_millis((*next_poll_ms).min(until(deadline))))
            }
            NonceState::AwaitingTimeout { deadline_ms, .. } => {
                Some(Duration::from_millis(until(*deadline_ms)))
            }
        }
    }

    /// Stores a nonce's new timer; returns the one it replaces, to cancel.
    pub(super) fn set_timer(&mut self, nonce: u64, timer: Timer) -> Option<Timer> {
        self.timers.insert(nonce, timer)
    }

    /// Removes a nonce's timer (it fired, or is about to be replaced).
    pub(super) fn take_timer(&mut self, nonce: u64) -> Option<Timer> {
        self.timers.remove(&nonce)
    }

    /// A pending finish past its execution deadline: the timeout vote decides.
    pub(super) fn finish_overdue(&self, nonce: u64, now_ms: i64) -> bool {
        self.attempts
            .get(&nonce)
            .is_some_and(|e| now_ms >= self.deadline(e, self.deadlines.buffer_ms).0)
    }

    /// Doubles the poll interval of a pending finish (up to `max_ms`). `true` when the nonce is
    /// still a pending finish (its timer must be re-armed).
    pub(super) fn back_off_poll(&mut self, nonce: u64, max_ms: u64) -> bool {
        match self.attempts.get_mut(&nonce).map(|e| &mut e.state) {
            Some(NonceState::PendingFinish { next_poll_ms, .. }) => {
                *next_poll_ms = next_poll_ms.saturating_mul(2).min(max_ms);
                true
            }
            _ => false,
        }
    }

    /// The record of `nonce` in our state decides its timeout (not whether we saw a receipt): a
    /// Started record (its ConfirmStart may have come through a mempool) gets an execution
    /// timeout from its `confirmed_at`, a Pending one a refused timeout. `false` when the record
    /// is neither (nothing to time out).
    pub(super) fn follow_record(
        &mut self,
        nonce: u64,
        record: Option<(InferenceStatus, i64)>,
    ) -> bool {
        let Some(entry) = self.attempts.get_mut(&nonce) else {
            return false;
        };
        match record {
            Some((InferenceStatus::Started, confirmed_at)) => {
                entry.confirmed_at = Some(confirmed_at);
                true
            }
            Some((InferenceStatus::Pending, _)) => {
                entry.confirmed_at = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Debug counts: in flight, pending finishes, awaiting a timeout.
    pub(super) fn snapshot(&self) -> (usize, Vec<u64>, Vec<u64>) {
        let e = self.attempts.values();
        (
            e.clone().filter(|e| e.is_in_flight()).count(),
            e.clone()
                .filter(|e| e.is_pending_finish())
                .map(|e| e.nonce)
                .collect(),
            e.filter(|e| e.is_awaiting_timeout())
                .map(|e| e.nonce)
                .collect(),
        )
    }
}
