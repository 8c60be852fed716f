//! The escrow actor's settling: the one outcome of each attempt (through the fault guard), finish
//! reconciliation polls and the hand-over to timeout votes (`actor/voting.rs`) — the effects of
//! what the nonce book and the fault guard decide, run on the actor (timers `nonce <n>` and
//! `fault_release`).

use std::time::Duration;

use actix::prelude::*;
use slog::{info, warn};

use super::super::{
    book::Settled,
    durable::{OnDurable, Pending},
    guard::Outbound,
    nonces::NonceState,
};
use super::EscrowActor;
use crate::{
    outcome::{AttemptOutcome, OutcomeClass},
    policy::{
        correlation::SharedFault,
        mempool::{self, ForeignTx},
        reason::{EmptyDiffReason, OutcomeReason},
    },
    protocol::{crypto::Address, proto::DevshardTx, warm::Acceptance},
    stats::timers,
};

impl EscrowActor {
    /// A host proposed txs only the escrow's creator may sequence (e.g. `MsgFinalizeRound`):
    /// they were dropped; the host is charged a byzantine fault (ejected at once).
    fn charge_foreign_txs(&mut self, from: &Address, refused: &[ForeignTx]) {
        for kind in refused {
            warn!(self.deps.log, "foreign tx in a host mempool dropped"; "stage" => "mempool_foreign_tx",
                "host" => from.short(), "kind" => kind.label());
            self.deps
                .metrics
                .mempool_foreign_txs
                .with_label_values(&[kind.label()])
                .inc();
        }
        self.charge_byzantine(from, OutcomeReason::ForeignMempoolTx);
    }

    /// Charges `from` a verified byzantine fault outside any attempt (a foreign mempool tx, an
    /// invalid final-state signature): one host-fault outcome, not through the correlation
    /// guard (the fault is proven by a signature, not inferred from a failure).
    pub(super) fn charge_byzantine(&mut self, from: &Address, reason: OutcomeReason) {
        let s = Settled {
            participant: from.clone(),
            winner: false,
            request_id: String::new(),
            outcome: AttemptOutcome {
                escrow_id: self.session.info().escrow_id.clone(),
                nonce: self.session.nonce(),
                class: OutcomeClass::HostFault,
                reason,
                timings: Default::default(),
                finish_late_ms: None,
            },
        };
        let sent = self.guard.emit(s, self.routing.counts(), self.now_ms());
        self.send_outcomes(sent);
    }

    /// Emits the final outcome of an attempt (exactly once per attempt).
    pub(super) fn emit(
        &mut self,
        nonce: u64,
        class: OutcomeClass,
        reason: OutcomeReason,
        late: Option<i64>,
    ) {
        let id = self.session.info().escrow_id.clone();
        if let Some(s) = self.book.take_outcome(&id, nonce, class, reason, late) {
            let sent = self.guard.emit(s, self.routing.counts(), self.now_ms());
            self.send_outcomes(sent);
        }
    }

    /// Settles a failed attempt through the correlation guard. Returns the shared fault, if the
    /// failure is shared by several hosts.
    pub(super) fn emit_failure(
        &mut self,
        nonce: u64,
        class: OutcomeClass,
        reason: OutcomeReason,
        (status, message): (Option<u16>, String),
        ctx: &mut Context<Self>,
    ) -> Option<SharedFault<Address>> {
        let id = self.session.info().escrow_id.clone();
        let s = self.book.take_outcome(&id, nonce, class, reason, None)?;
        let (counts, now) = (self.routing.counts(), self.now_ms());
        let settled = self.guard.emit_failure(s, counts, status, &message, now);
        self.send_outcomes(settled.send);
        if settled.held {
            self.arm_release(ctx);
        }
        settled.shared
    }

    fn send_outcomes(&self, outcomes: Vec<Outbound>) {
        for (msg, request) in outcomes {
            let o = &msg.outcome;
            info!(self.deps.log, "attempt settled"; "stage" => "attempt_outcome", "nonce" => o.nonce,
                "host" => msg.participant.short(), "class" => o.class.as_str(), "reason" => &o.reason,
                "shared" => msg.shared, "request" => &request);
            if self.deps.outcomes.try_send(msg).is_err() {
                warn!(self.deps.log, "outcome dropped: participant router unavailable"; "stage" => "outcome_dropped");
            }
        }
    }

    fn arm_release(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.guard.take_release_timer() {
            t.cancel(&self.stats, ctx);
        }
        let Some(at) = self.guard.next_release() else {
            return;
        };
        let delay =
            Duration::from_millis(u64::try_from(at.saturating_sub(self.now_ms())).unwrap_or(0));
        let timer = timers::run_later(&self.stats, ctx, "fault_release", delay, |act, ctx| {
            let released = act.guard.release_due(act.now_ms());
            act.send_outcomes(released);
            act.arm_release(ctx);
        });
        self.guard.set_release_timer(timer);
    }

    /// A finished nonce is settled once its finish is durable; an unfinished one goes to
    /// timeout handling.
    pub(super) fn settle_or_time_out(
        &mut self,
        nonce: u64,
        finished: bool,
        reason: OutcomeReason,
        ctx: &mut Context<Self>,
    ) {
        if finished {
            self.settle_finished(nonce, ctx);
        } else {
            self.await_timeout(nonce, reason, ctx);
        }
    }

    /// A nonce whose verified finish marker was seen leaves the book only when the diff that
    /// sequences the finish is durable: a `kill -9` before that diff loses the finish with the
    /// pending txs, and the restarted escrow must still know the nonce (it comes back from the
    /// log as unfinished and is reconciled from its executor's mempool, `poll_finish`). A finish
    /// still queued is sequenced on its own after `finish_poll_initial_ms` when no diff took it
    /// meanwhile (the next grant usually does).
    pub(super) fn settle_finished(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        if let Some(t) = self.book.take_timer(nonce) {
            t.cancel(&self.stats, ctx);
        }
        let queued = self.session.pending().holds_finish(nonce);
        let durable_at = self.session.nonce().saturating_add(u64::from(queued));
        if !self.book.finished(nonce, durable_at) {
            return;
        }
        if durable_at <= self.durable.durable_nonce() {
            return self.release_durable_finishes(ctx);
        }
        let delay = Duration::from_millis(self.deps.cfg.finish_poll_initial_ms);
        let name = format!("nonce {nonce}");
        let timer = timers::run_later(&self.stats, ctx, name, delay, move |act, ctx| {
            act.book.take_timer(nonce);
            act.sequence_finish(nonce, ctx);
        });
        self.book.set_timer(nonce, timer);
    }

    /// A finish no diff took since it was seen: one diff sequences the pending txs.
    fn sequence_finish(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        let finished = matches!(
            self.book.entry(nonce).map(|e| &e.state),
            Some(NonceState::Finished { .. })
        );
        if !finished || !self.session.pending().holds_finish(nonce) {
            return;
        }
        let composed = self.durable.compose_withheld(
            &mut self.session,
            &self.deps,
            EmptyDiffReason::FinishDurable,
        );
        if let Some((diff, ack)) = composed {
            info!(self.deps.log, "finish marker sequenced on its own"; "stage" => "finish_sequenced",
                "nonce" => nonce, "diff_nonce" => diff.nonce);
            let then = OnDurable::Nothing;
            self.await_durable(
                Pending {
                    nonce: diff.nonce,
                    ack,
                    then,
                },
                ctx,
            );
        }
    }

    /// Finished nonces whose finish became durable leave the book.
    pub(super) fn release_durable_finishes(&mut self, ctx: &mut Context<Self>) {
        for t in self.book.durable_finishes(self.durable.durable_nonce()) {
            t.cancel(&self.stats, ctx);
        }
    }

    /// Queues what `from`'s mempool may carry (ConfirmStart, Finish, Validation,
    /// ValidationVote: `policy/mempool.rs`) and settles every pending finish it completes. Any
    /// other tx is dropped, logged and counted, and `from` is charged as byzantine.
    pub(super) fn absorb_mempool(
        &mut self,
        from: &Address,
        txs: Vec<DevshardTx>,
        ctx: &mut Context<Self>,
    ) {
        let (txs, refused) = mempool::sift(txs);
        if !refused.is_empty() {
            self.charge_foreign_txs(from, &refused);
        }
        let signers = self.session.mempool_signers_to_check(&txs);
        if signers
            .iter()
            .any(|s| s.acceptance == Acceptance::Unresolved)
        {
            // Held until the chain was asked about the finish markers' warm signers.
            let check = self.check_warm_signers(signers);
            ctx.spawn(
                check
                    .into_actor(self)
                    .map(move |(), act, ctx| act.absorb_checked(txs, ctx)),
            );
            return;
        }
        self.absorb_checked(txs, ctx);
    }

    fn absorb_checked(&mut self, txs: Vec<DevshardTx>, ctx: &mut Context<Self>) {
        for nonce in self.session.process_mempool(txs) {
            let Some(entry) = self.book.entry(nonce) else {
                continue;
            };
            match entry.state {
                NonceState::PendingFinish { ended_ms, .. } => {
                    let late = self.now_ms().saturating_sub(ended_ms);
                    info!(self.deps.log, "finish marker arrived late"; "stage" => "winner_finish_arrived_late",
                        "nonce" => nonce, "host" => entry.host.short(), "elapsed_ms" => late);
                    self.emit(
                        nonce,
                        OutcomeClass::Success,
                        OutcomeReason::FinishedLate,
                        Some(late),
                    );
                }
                NonceState::AwaitingTimeout { .. } => {
                    info!(self.deps.log, "finish arrived; no timeout needed"; "stage" => "timeout_skipped",
                        "nonce" => nonce, "reason" => "nonce_already_finished");
                }
                NonceState::InFlight | NonceState::Finished { .. } => continue,
            }
            self.settle_finished(nonce, ctx);
        }
    }

    /// Puts a failed, unfinished attempt on the timeout path.
    pub(super) fn await_timeout(
        &mut self,
        nonce: u64,
        reason: OutcomeReason,
        ctx: &mut Context<Self>,
    ) {
        self.follow_record(nonce);
        if self.book.await_timeout(nonce, reason, self.now_ms()) {
            self.arm_nonce_timer(nonce, ctx);
        }
    }

    /// Arms the timer of an unsettled nonce according to its state.
    pub(super) fn arm_nonce_timer(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        let Some(delay) = self.book.timer_delay(nonce, self.now_ms()) else {
            return;
        };
        if let Some(old) = self.book.take_timer(nonce) {
            old.cancel(&self.stats, ctx);
        }
        let name = format!("nonce {nonce}");
        let timer = timers::run_later(&self.stats, ctx, name, delay, move |act, ctx| {
            act.book.take_timer(nonce);
            match act.book.entry(nonce).map(|e| &e.state) {
                Some(NonceState::PendingFinish { .. }) => act.poll_finish(nonce, ctx),
                Some(NonceState::AwaitingTimeout { .. }) => {
                    act.book.enqueue_timeout(nonce);
                    act.next_timeout(ctx);
                }
                _ => {}
            }
        });
        self.book.set_timer(nonce, timer);
    }

    /// One reconciliation poll of the executor's mempool (1 s, 2 s, 4 s … capped), until the
    /// finish appears or the execution deadline passes: then one last poll, and the timeout vote
    /// decides. That last poll is what reconciles a nonce restored from the log past its deadline
    /// whose finish (and ConfirmStart) a `kill -9` lost before they were sequenced: the executor
    /// still holds them, and a vote without them would be one the hosts reject.
    fn poll_finish(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        let overdue = self.book.finish_overdue(nonce, self.now_ms());
        let info = self.session.info().clone();
        let Some(host) = self.book.entry(nonce).and_then(|e| info.host(&e.host)) else {
            return;
        };
        let url = info.session_url(host, "mempool");
        let (timeout, max) = (
            self.deps.cfg.host_timeouts.query,
            self.deps.cfg.finish_poll_max_ms,
        );
        let from = host.address.clone();
        let fut = async move { crate::host::client::get_mempool(&url, timeout).await };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            if let Ok(txs) = res {
                act.absorb_mempool(&from, txs, ctx);
            }
            let still_pending = act.book.back_off_poll(nonce, max);
            if still_pending && overdue {
                act.await_timeout(nonce, OutcomeReason::FinishNeverArrived, ctx);
            } else if still_pending {
                act.arm_nonce_timer(nonce, ctx);
            }
        }));
    }
}
