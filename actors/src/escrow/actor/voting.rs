//! The escrow actor's timeout votes (docs/protocol.md §6.5): several nonces at once (bounded by
//! `timeout_votes_parallel`), each asking all its verifiers in parallel with the whole catch-up
//! they lack; the reason asked follows the record's state (Started → execution, Pending →
//! refused); a vote short of quorum is asked again with back-off. A confirmed timeout goes out
//! in a `SendPendingDiff`. Timers: the `nonce <n>` timer of each awaiting nonce (its deadline, or
//! its back-off). Log stages `timeout_vote_started`, `timeout_vote_retry`,
//! `timeout_vote_given_up`, `timeout_rescheduled`, `timeout_votes_hastened`; metrics
//! `devshard_timeout_votes_running`, `devshard_timeout_vote_retries_total{reason}`,
//! `devshard_timeout_votes_hastened_total{why}` (votes backed off asked again early: the escrow
//! drains, or a verifier came back).

use actix::prelude::*;
use slog::{info, warn};

use super::super::{
    book::NextTimeout,
    durable::{OnDurable, Pending},
    sync,
    timeouts::{self, PendingDiffError},
};
use super::EscrowActor;
use crate::{
    outcome::OutcomeClass,
    policy::reason::{EmptyDiffReason, OutcomeReason},
    protocol::proto::TimeoutReason,
    stats::timers,
};

/// Why votes waiting for their back-off are asked again early ([`EscrowActor::hasten_short_votes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VoteWake {
    /// The escrow drains: its settlement waits on these votes, so they are asked again at
    /// least every `timeout_vote_retry_ms` instead of after back-offs of up to 300 s.
    Draining,
    /// A host that refused connections answered: a verifier that was down may vote now.
    HostReachable,
    /// A host's catch-up is over: a verifier that was behind may vote now.
    HostCaughtUp,
}

impl VoteWake {
    fn as_label(self) -> &'static str {
        match self {
            VoteWake::Draining => "draining",
            VoteWake::HostReachable => "host_reachable",
            VoteWake::HostCaughtUp => "host_caught_up",
        }
    }
}

/// Least time between two syncs a vote asks for.
const SYNC_KICK_GAP_MS: i64 = 5_000;
/// How long a vote waits for far verifiers to be caught up before it is tried again.
const VOTERS_CATCH_UP_WAIT_MS: i64 = 2_000;

impl EscrowActor {
    /// Starts queued timeout votes while fewer than `timeout_votes_parallel` collect.
    pub(super) fn next_timeout(&mut self, ctx: &mut Context<Self>) {
        loop {
            let session = &self.session;
            match self.book.next_timeout(|n| session.is_finished(n)) {
                NextTimeout::FinishedLate(nonce) => {
                    self.emit(
                        nonce,
                        OutcomeClass::Success,
                        OutcomeReason::FinishedLate,
                        None,
                    );
                    self.settle_finished(nonce, ctx);
                }
                NextTimeout::Vote(nonce) => self.collect_votes(nonce, ctx),
                NextTimeout::Idle => return,
            }
        }
    }

    /// The nonce's record in our state, for its timeout (`book.follow_record`).
    pub(super) fn follow_record(&mut self, nonce: u64) -> bool {
        let record = self
            .session
            .state()
            .record(nonce)
            .map(|r| (r.status, r.confirmed_at));
        self.book.follow_record(nonce, record)
    }

    fn collect_votes(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        // Voters judge from their own state: sequence pending txs first (e.g. this nonce's
        // ConfirmStart, without which an execution timeout cannot be verified), and send only
        // diffs that are durable — the vote requests go out once this flush/ack resolved.
        // Confirmed timeouts of other nonces are not that context (`settle_pending`).
        let ready = self.durable.settle_pending(
            &mut self.session,
            &self.deps,
            EmptyDiffReason::TimeoutContext,
        );
        let ready = match ready {
            Some((n, ack)) => self.durable_then_ready(n, ack, ctx),
            None => self.deps.store.flush(),
        };
        if !self.follow_record(nonce) {
            // Neither Pending nor Started in our state: nothing a verifier could time out.
            self.book.vote_done(nonce);
            self.drop_unconfirmed(nonce);
            return;
        }
        let Some(entry) = self.book.entry(nonce) else {
            self.book.vote_done(nonce);
            return;
        };
        let (deadline, reason) = self.book.deadline(entry, self.deps.cfg.timeout_buffer_ms);
        let now = self.now_ms();
        if deadline > now && !self.book.retried(nonce) {
            // The record moved on (a ConfirmStart through a mempool): its own deadline.
            self.book.vote_done(nonce);
            info!(self.deps.log, "timeout reason follows the record"; "stage" => "timeout_rescheduled",
                "nonce" => nonce, "reason" => reason.as_wire(), "remaining_ms" => deadline - now);
            self.book.set_deadline(nonce, deadline);
            return self.arm_nonce_timer(nonce, ctx);
        }
        let carried = &self.vote_carrying;
        let asked =
            timeouts::collect_votes(&self.session, &self.deps, (entry, carried), reason, ready);
        let Some((votes, carrying)) = asked else {
            // The verifiers that may be asked cannot pass: catch the others up (one sync, which
            // also reaches ejected hosts), and ask again shortly; no round is spent.
            self.book.vote_done(nonce);
            self.kick_sync(false, ctx);
            slog::debug!(self.deps.log, "timeout vote waits for verifiers to catch up";
                "stage" => "timeout_vote_waits", "nonce" => nonce);
            self.book
                .set_deadline(nonce, now.saturating_add(VOTERS_CATCH_UP_WAIT_MS));
            return self.arm_nonce_timer(nonce, ctx);
        };
        self.deps.metrics.timeout_votes_running.inc();
        info!(self.deps.log, "timeout vote collecting"; "stage" => "timeout_vote_started",
            "nonce" => nonce, "reason" => reason.as_wire(), "parallel" => self.book.votes_running());
        self.vote_carrying.extend(carrying.iter().cloned());
        let checked = votes.into_actor(self).then(move |round, act, ctx| {
            if !round.failed.is_empty() {
                // A verifier that answered an error may have lost its state: a sync finds out
                // what it holds (its sync point moves back), so the next round carries it. The
                // sync sends the latest diff again to hosts that lack nothing by their sync
                // point: run J (seed `long-1`, 1 225 s) had a draining escrow whose verifiers
                // restarted empty after its last diff; every sync point said "in sync", each
                // kicked sync sent nothing, and five timeouts stayed unconfirmed for minutes.
                act.kick_sync(true, ctx);
            }
            for host in &carrying {
                act.vote_carrying.remove(host);
            }
            for (host, top) in &round.carried {
                act.session.acknowledged(host, *top);
            }
            if !round.carried.is_empty() {
                act.durable.syncs_changed();
            }
            let answers = round.answers;
            let check = act.check_warm_signers(act.vote_signers(nonce, reason, &answers));
            check.into_actor(act).map(move |(), _, _| answers)
        });
        ctx.spawn(checked.map(move |answers, act, ctx| {
            act.book.vote_done(nonce);
            act.deps.metrics.timeout_votes_running.dec();
            match timeouts::tally(&act.session, &act.deps, nonce, reason, answers) {
                None => act.vote_short(nonce, reason, ctx),
                Some(tx) => {
                    act.emit(
                        nonce,
                        OutcomeClass::HostFault,
                        OutcomeReason::TimeoutConfirmed,
                        None,
                    );
                    act.book.forget_timed_out(nonce);
                    act.session.queue(tx);
                    act.batch_timeout_txs(ctx);
                }
            }
            act.next_timeout(ctx);
        }));
    }

    /// A vote fell short of quorum (voters down, behind, or not yet past the deadline on their
    /// clock): asked again after a back-off, until its rounds are used up.
    fn vote_short(&mut self, nonce: u64, reason: TimeoutReason, ctx: &mut Context<Self>) {
        if self.session.is_finished(nonce) {
            return self.settle_or_time_out(nonce, true, OutcomeReason::FinishedLate, ctx);
        }
        match self.book.vote_short(nonce, self.now_ms()) {
            Some(wait) => {
                self.deps
                    .metrics
                    .timeout_vote_retries
                    .with_label_values(&[reason.as_wire()])
                    .inc();
                info!(self.deps.log, "timeout vote short of quorum; asked again later";
                    "stage" => "timeout_vote_retry", "nonce" => nonce, "reason" => reason.as_wire(),
                    "wait_ms" => u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                self.arm_nonce_timer(nonce, ctx);
            }
            None => {
                warn!(self.deps.log, "timeout vote given up"; "stage" => "timeout_vote_given_up",
                    "nonce" => nonce, "reason" => reason.as_wire());
                self.drop_unconfirmed(nonce);
            }
        }
    }

    /// Votes short of quorum that wait for their back-off are asked again soon: within
    /// `timeout_vote_retry_ms` while draining, at once when a verifier came back (at most once
    /// per `timeout_vote_retry_ms`). Their rounds still count (a nonce is given up after
    /// `timeout_vote_rounds`). Found by the rotating hour-long run (run H): a draining escrow's
    /// settlement waited minutes for votes backed off to 160–300 s while their verifiers were
    /// back.
    pub(super) fn hasten_short_votes(&mut self, wake: VoteWake, ctx: &mut Context<Self>) {
        let now = self.now_ms();
        let returned = wake != VoteWake::Draining;
        if returned && !self.book.vote_wake_due(now) {
            return;
        }
        let within = if returned {
            0
        } else {
            i64::try_from(self.deps.cfg.timeout_vote_retry_ms).unwrap_or(i64::MAX)
        };
        let moved = self.book.hasten_short_votes(now, within);
        if moved.is_empty() {
            return;
        }
        if returned {
            self.book.votes_woken(now);
        }
        self.deps
            .metrics
            .timeout_votes_hastened
            .with_label_values(&[wake.as_label()])
            .inc_by(u64::try_from(moved.len()).unwrap_or(u64::MAX));
        info!(self.deps.log, "timeout votes short of quorum asked again early";
            "stage" => "timeout_votes_hastened", "why" => wake.as_label(), "nonces" => moved.len(),
            "within_ms" => within);
        for nonce in moved {
            self.arm_nonce_timer(nonce, ctx);
        }
    }

    /// A confirmed timeout's tx waits `timeout_tx_batch_ms` for the next request's diff to
    /// carry it (every composed diff takes the queued txs); then one diff carries every timeout
    /// still queued. Run J (seed `long-1`, 1 729 s): 2 300 execution timeouts confirmed at
    /// about 100 a second, each in a diff of its own that every host applied and verified,
    /// while the edge admitted 45 requests a second and invariant 3's probe waited past 2 s.
    fn batch_timeout_txs(&mut self, ctx: &mut Context<Self>) {
        let delay = self.deps.cfg.timeout_tx_batch_ms;
        if delay == 0 {
            return self.send_pending_diff(ctx);
        }
        if self.timeout_batch.is_some() {
            return;
        }
        let delay = std::time::Duration::from_millis(delay);
        let timer = timers::run_later(&self.stats, ctx, "timeout_batch", delay, |act, ctx| {
            act.timeout_batch = None;
            let queued = act.session.pending().len();
            if queued == 0 {
                return;
            }
            act.deps
                .metrics
                .timeout_txs_batched
                .observe(f64::from(u32::try_from(queued).unwrap_or(u32::MAX)));
            slog::debug!(act.deps.log, "confirmed timeouts sequenced in one diff";
                "stage" => "timeout_txs_batched", "txs" => queued);
            act.send_pending_diff(ctx);
        });
        self.timeout_batch = Some(timer);
    }

    /// Composes the next nonce without a payload and sends it to its host once durable (only
    /// made durable when that host is withheld: catch-up carries it later).
    fn send_pending_diff(&mut self, ctx: &mut Context<Self>) {
        let composed = self.durable.compose_withheld(
            &mut self.session,
            &self.deps,
            EmptyDiffReason::PendingDiff,
        );
        let Some((diff, ack)) = composed else {
            return;
        };
        let info = self.session.info().clone();
        let Some(host) = info.host_for_nonce(diff.nonce) else {
            return;
        };
        if self.routing.is_withheld(&host.address) {
            let then = OnDurable::Nothing;
            return self.await_durable(
                Pending {
                    nonce: diff.nonce,
                    ack,
                    then,
                },
                ctx,
            );
        }
        let send = timeouts::send_pending_diff(&self.session, &self.deps, host, diff.nonce, ack);
        let addr = host.address.clone();
        let nonce = diff.nonce;
        ctx.spawn(send.into_actor(self).map(move |res, act, ctx| match res {
            Err(PendingDiffError::NotDurable(e)) => act.after_ack(nonce, Err(e), ctx),
            Ok(sent) => {
                act.after_ack(nonce, Ok(()), ctx);
                if let Some(r) = sent.receipt {
                    if let Err(e) = act.take_report(&addr, None, &r) {
                        warn!(act.deps.log, "pending diff response rejected"; "stage" => "process_response_failed",
                            "host" => addr.short(), "error" => %e);
                    }
                    act.durable.syncs_changed();
                }
                act.absorb_mempool(&addr, sent.mempool, ctx);
            }
            Err(PendingDiffError::NotDelivered { error, holds }) => {
                act.after_ack(nonce, Ok(()), ctx);
                warn!(act.deps.log, "pending diff not delivered"; "stage" => "pending_diff_failed",
                    "host" => addr.short(), "error" => error);
                // A host that restarted empty (or missed diffs) says what it holds: its sync
                // point moves back, so the next send replays from there (as after a sync or an
                // attempt). Found by a chaos run: a host restarted empty kept answering
                // "expected 1, got 79" to every pending diff and stayed at nonce 0 after syncs.
                if let Some(holds) = holds {
                    sync::rewind(&mut act.session, &act.deps, &addr, holds);
                    act.durable.syncs_changed();
                }
            }
        }));
    }
}

impl EscrowActor {
    /// Asks this escrow for a `SyncHosts` (hosts far behind caught up once), at most every
    /// [`SYNC_KICK_GAP_MS`]; `verify`: hosts in sync by their sync point are sent the latest
    /// diff again (`sync_hosts`).
    fn kick_sync(&mut self, verify: bool, ctx: &mut Context<Self>) {
        let now = self.now_ms();
        if self
            .last_sync_kick_ms
            .is_some_and(|t| now.saturating_sub(t) < SYNC_KICK_GAP_MS)
        {
            return;
        }
        self.last_sync_kick_ms = Some(now);
        info!(self.deps.log, "verifiers far behind: catching them up before the vote is asked again";
            "stage" => "timeout_vote_sync_kicked");
        let sync = self.sync_hosts((true, verify), ctx);
        ctx.spawn(sync.map(|_, _, _| ()));
    }

    /// A nonce no vote can time out any more: reported cancelled (unconfirmed) and forgotten.
    fn drop_unconfirmed(&mut self, nonce: u64) {
        self.emit(
            nonce,
            OutcomeClass::Cancelled,
            OutcomeReason::TimeoutUnconfirmed,
            None,
        );
        self.book.forget(nonce);
    }
}
