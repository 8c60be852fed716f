//! Settling attempts: receipts (`processResponse`), ends, the one outcome per attempt, and the
//! reconciliation of finish markers that arrive after the stream ended (HEALTH.md §5).

use std::time::Duration;

use actix::prelude::*;
use slog::info;

use super::{
    actor::EscrowActor,
    attempt::{AttemptEnd, AttemptVerdict},
    messages::{AttemptEnded, AttemptReceipt},
    nonces::NonceState,
    session::SessionError,
};
use crate::{
    host::{client, HostError, Rejection},
    outcome::OutcomeClass,
    policy::{attribution, correlation, reason::OutcomeReason},
    protocol::proto::DevshardTx,
    stats::timers,
};

impl Handler<AttemptReceipt> for EscrowActor {
    type Result = Result<(), SessionError>;

    fn handle(&mut self, msg: AttemptReceipt, _: &mut Self::Context) -> Self::Result {
        let inference = (!msg.catch_up).then_some(msg.nonce);
        self.session
            .process_receipt(&msg.host, inference, &msg.receipt)?;
        self.sync_dirty = true;
        if let Some(entry) = inference.and_then(|n| self.attempts.get_mut(&n)) {
            if msg.receipt.receipt.is_some() {
                entry.confirmed_at = msg.receipt.confirmed_at;
            }
        }
        Ok(())
    }
}

impl Handler<AttemptEnded> for EscrowActor {
    type Result = MessageResult<AttemptEnded>;

    fn handle(&mut self, msg: AttemptEnded, ctx: &mut Self::Context) -> Self::Result {
        let nonce = msg.nonce;
        if let Some(txs) = msg.report.mempool.clone() {
            self.absorb_mempool(txs, ctx);
        }
        if let AttemptEnd::Host(e) = &msg.report.end {
            if matches!(
                e.rejection(),
                Some(Rejection::NonceGap { .. } | Rejection::SessionNotFound)
            ) {
                // The host lost diffs (restarted empty): replay from nonce 1 on the next send.
                self.session.reset_host_sync(&msg.host);
                self.sync_dirty = true;
            }
        }
        let finished = self.session.is_finished(nonce);
        let (class, reason) = attribution::classify(&msg.report.end, finished);
        let now = self.now_ms();
        let first_poll = self.cfg.finish_poll_initial_ms;
        let Some(entry) = self.attempts.get_mut(&nonce) else {
            return MessageResult(AttemptVerdict::default());
        };
        entry.timings = msg.report.timings;
        entry.crowned = msg.report.crowned;
        entry.race_id = None;
        let mut verdict = AttemptVerdict {
            retry: !msg.report.crowned && attribution::worth_retrying(class),
            shared_fault: None,
            shared_class: None,
        };
        match class {
            OutcomeClass::PendingFinish => {
                entry.state = NonceState::PendingFinish {
                    ended_ms: now,
                    next_poll_ms: first_poll,
                };
                info!(self.log, "whole answer delivered, finish marker pending";
                    "stage" => "winner_finish_pending", "nonce" => nonce, "host" => msg.host.short());
                self.arm_nonce_timer(nonce, ctx);
            }
            OutcomeClass::Success | OutcomeClass::Cancelled => {
                self.emit(nonce, class, reason, None);
                self.settle_or_time_out(nonce, finished, reason, ctx);
            }
            _ => {
                if class == OutcomeClass::Diverged {
                    self.start_repair(&msg.host, ctx);
                }
                let (status, message) = end_details(&msg.report.end);
                if let Some(shared) = self.emit_failure(nonce, class, reason, status, &message, ctx)
                {
                    verdict.retry = false;
                    verdict.shared_class = Some(shared.signature.class);
                    verdict.shared_fault = Some(correlation::cause_message(&shared));
                }
                self.settle_or_time_out(nonce, finished, reason, ctx);
            }
        }
        MessageResult(verdict)
    }
}

/// HTTP status and message of a failed attempt (for the fault signature).
fn end_details(end: &AttemptEnd) -> (Option<u16>, String) {
    match end {
        AttemptEnd::Host(HostError::Status {
            status, message, ..
        }) => (Some(*status), message.clone()),
        AttemptEnd::Host(e) => (None, e.to_string()),
        AttemptEnd::ErrorEvent { status, message } => (*status, message.clone()),
        AttemptEnd::ReceiptRejected(e) => (None, e.to_string()),
        other => (None, format!("{other:?}")),
    }
}

impl EscrowActor {
    /// A finished nonce is settled; an unfinished one goes to timeout handling.
    fn settle_or_time_out(
        &mut self,
        nonce: u64,
        finished: bool,
        reason: OutcomeReason,
        ctx: &mut Context<Self>,
    ) {
        if finished {
            self.attempts.remove(&nonce);
        } else {
            self.await_timeout(nonce, reason, ctx);
        }
    }

    /// Queues a host's mempool and settles every pending finish it completes.
    pub(super) fn absorb_mempool(&mut self, txs: Vec<DevshardTx>, ctx: &mut Context<Self>) {
        for nonce in self.session.process_mempool(txs) {
            let Some(entry) = self.attempts.get(&nonce) else {
                continue;
            };
            match entry.state {
                NonceState::PendingFinish { ended_ms, .. } => {
                    let late = self.now_ms().saturating_sub(ended_ms);
                    info!(self.log, "finish marker arrived late"; "stage" => "winner_finish_arrived_late",
                        "nonce" => nonce, "host" => entry.host.short(), "elapsed_ms" => late);
                    self.emit(
                        nonce,
                        OutcomeClass::Success,
                        OutcomeReason::FinishedLate,
                        Some(late),
                    );
                    self.settle_removed(nonce, ctx);
                }
                NonceState::AwaitingTimeout { .. } => {
                    info!(self.log, "finish arrived; no timeout needed"; "stage" => "timeout_skipped",
                        "nonce" => nonce, "reason" => "nonce_already_finished");
                    self.settle_removed(nonce, ctx);
                }
                NonceState::InFlight => {}
            }
        }
    }

    fn settle_removed(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        self.attempts.remove(&nonce);
        if let Some(t) = self.nonce_timers.remove(&nonce) {
            t.cancel(&self.stats, ctx);
        }
    }

    /// Arms the timer of an unsettled nonce according to its state.
    pub(super) fn arm_nonce_timer(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        let Some(entry) = self.attempts.get(&nonce) else {
            return;
        };
        let delay = match &entry.state {
            NonceState::InFlight => return,
            NonceState::PendingFinish { next_poll_ms, .. } => {
                // Poll at the back-off interval, but never past the execution deadline.
                let cfg = &self.session.info().config;
                let (deadline, _) = entry.timeout_deadline(
                    cfg.refusal_timeout,
                    cfg.execution_timeout,
                    self.cfg.timeout_buffer_ms,
                );
                let to_deadline =
                    u64::try_from(deadline.saturating_sub(self.now_ms())).unwrap_or(0);
                Duration::from_millis((*next_poll_ms).min(to_deadline))
            }
            NonceState::AwaitingTimeout { deadline_ms, .. } => Duration::from_millis(
                u64::try_from(deadline_ms.saturating_sub(self.now_ms())).unwrap_or(0),
            ),
        };
        if let Some(old) = self.nonce_timers.remove(&nonce) {
            old.cancel(&self.stats, ctx);
        }
        let name = format!("nonce {nonce}");
        let timer = timers::run_later(&self.stats, ctx, name, delay, move |act, ctx| {
            act.nonce_timers.remove(&nonce);
            act.nonce_timer_fired(nonce, ctx);
        });
        self.nonce_timers.insert(nonce, timer);
    }

    fn nonce_timer_fired(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        let Some(entry) = self.attempts.get(&nonce) else {
            return;
        };
        match entry.state {
            NonceState::PendingFinish { .. } => self.poll_finish(nonce, ctx),
            NonceState::AwaitingTimeout { .. } => self.enqueue_timeout(nonce, ctx),
            NonceState::InFlight => {}
        }
    }

    /// One reconciliation poll of the executor's mempool (1 s, 2 s, 4 s … capped), until the
    /// finish appears or the execution deadline passes (then the timeout vote decides).
    fn poll_finish(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        let Some(entry) = self.attempts.get(&nonce) else {
            return;
        };
        let (deadline, _) = entry.timeout_deadline(
            self.session.info().config.refusal_timeout,
            self.session.info().config.execution_timeout,
            self.cfg.timeout_buffer_ms,
        );
        if self.now_ms() >= deadline {
            self.await_timeout(nonce, OutcomeReason::FinishNeverArrived, ctx);
            return;
        }
        let info = self.session.info().clone();
        let Some(host) = info.host(&entry.host).cloned() else {
            return;
        };
        let url = info.session_url(&host, "mempool");
        let timeout = self.cfg.host_timeouts.query;
        let max = self.cfg.finish_poll_max_ms;
        let fut = async move { client::get_mempool(&url, timeout).await }
            .into_actor(self)
            .map(move |res, act, ctx| {
                if let Ok(txs) = res {
                    act.absorb_mempool(txs, ctx);
                }
                if let Some(entry) = act.attempts.get_mut(&nonce) {
                    if let NonceState::PendingFinish { next_poll_ms, .. } = &mut entry.state {
                        *next_poll_ms = next_poll_ms.saturating_mul(2).min(max);
                        act.arm_nonce_timer(nonce, ctx);
                    }
                }
            });
        ctx.spawn(fut);
    }
}
