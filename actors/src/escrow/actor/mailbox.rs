//! The escrow actor's mailbox: one handler per message, each handing the message to the part
//! that owns what it changes (the table is in `escrow/mod.rs`) and running the effects.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{info, warn};
use tokio::sync::oneshot;

use super::super::{
    attempt::AttemptVerdict,
    error::EscrowError,
    hedging,
    messages::{
        AttemptEnded, AttemptKind, AttemptReceipt, EscrowSnapshot, GetSnapshot, GrantUnused,
        InjectPanic, InjectStall, NonceGrant, RaceGone, RequestNonce, Retire,
    },
    picker::{self, Waiter},
    reach::Refusal,
    repair,
    routing::HostHealth,
    session::SessionError,
    settle, sync,
};
use super::EscrowActor;
use crate::{
    outcome::OutcomeClass,
    participant::messages::{ApplyHealthSettings, HealthChanged},
    policy::correlation,
    protocol::crypto::Address,
    stats::TrackedActor,
};

impl Handler<RequestNonce> for EscrowActor {
    type Result = ResponseFuture<Result<NonceGrant, EscrowError>>;

    fn handle(&mut self, msg: RequestNonce, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let id = self.escrow_id().to_string();
        if self.closing {
            return Box::pin(async move { Err(EscrowError::NotActive(id)) });
        }
        if self.picker.is_full() {
            return Box::pin(async move { Err(EscrowError::Saturated(id)) });
        }
        let waiter = Waiter {
            race_id: msg.race_id,
            params: msg.params,
            exclude: msg.exclude,
            kind: msg.kind.clone(),
            reply: tx,
        };
        let refused = picker::refusal(&self.session, &self.routing, self.book.len()).is_some();
        let now = self.now_ms();
        match msg.kind {
            AttemptKind::Hedge(req) if !refused => {
                let (session, deps) = (&self.session, &self.deps);
                if let Some(plan) = hedging::hedge(
                    (&mut self.routing, &self.reach),
                    session,
                    deps,
                    now,
                    waiter,
                    req,
                ) {
                    self.skip_then_grant(plan, ctx);
                }
            }
            AttemptKind::Pair if !refused => {
                if let Some(plan) = hedging::pair(
                    (&self.routing, &self.reach),
                    &self.session,
                    &self.deps,
                    now,
                    waiter,
                ) {
                    self.skip_then_grant(plan, ctx);
                }
            }
            kind => {
                if kind == AttemptKind::Primary {
                    if let Err(e) = self.reach_admit(waiter.race_id) {
                        return Box::pin(async move { Err(e) });
                    }
                    self.routing.on_primary(&self.deps.settings);
                }
                self.picker.push(waiter);
                self.pump(ctx);
            }
        }
        Box::pin(async move { rx.await.unwrap_or(Err(EscrowError::ShuttingDown(id))) })
    }
}

impl Handler<RaceGone> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: RaceGone, _: &mut Self::Context) {
        self.picker.race_gone(msg.race_id);
    }
}

impl Handler<GrantUnused> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: GrantUnused, ctx: &mut Self::Context) {
        self.unclaimed(msg.nonce, ctx);
    }
}

impl Handler<AttemptReceipt> for EscrowActor {
    type Result = ResponseActFuture<Self, Result<(), SessionError>>;

    fn handle(&mut self, msg: AttemptReceipt, ctx: &mut Self::Context) -> Self::Result {
        let inference = (!msg.catch_up).then_some(msg.nonce);
        let signers = self
            .session
            .signers_to_check(&msg.host, inference, &msg.receipt);
        if signers.is_empty() {
            return Box::pin(fut::ready(self.take_receipt(msg, ctx)));
        }
        // Warm signers are judged once the chain has been asked (`actor/warm.rs`).
        let check = self.check_warm_signers(signers);
        Box::pin(
            check
                .into_actor(self)
                .map(move |(), act, ctx| act.take_receipt(msg, ctx)),
        )
    }
}

impl EscrowActor {
    fn take_receipt(
        &mut self,
        msg: AttemptReceipt,
        ctx: &mut Context<Self>,
    ) -> Result<(), SessionError> {
        let inference = (!msg.catch_up).then_some(msg.nonce);
        let processed = self.take_report(&msg.host, inference, &msg.receipt);
        if let Err(SessionError::Unreproducible { nonce, reason }) = &processed {
            warn!(self.deps.log, "host state root cannot be reproduced"; "stage" => "state_root_unreproducible",
                "host" => msg.host.short(), "nonce" => nonce, "reason" => reason.as_str(),
                "detail" => %reason);
        }
        processed?;
        self.reach_answered(&msg.host, ctx);
        if !msg.catch_up {
            self.reach_caught_up(&msg.host, msg.nonce, true, ctx);
        }
        self.durable.syncs_changed();
        if let (Some(nonce), Some(_)) = (inference, &msg.receipt.receipt) {
            self.book.confirm(nonce, msg.receipt.confirmed_at);
        }
        Ok(())
    }
}

impl Handler<AttemptEnded> for EscrowActor {
    type Result = MessageResult<AttemptEnded>;

    fn handle(&mut self, msg: AttemptEnded, ctx: &mut Self::Context) -> Self::Result {
        let nonce = msg.nonce;
        if let Some(txs) = msg.report.mempool.clone() {
            self.absorb_mempool(&msg.host, txs, ctx);
        }
        let finished = self.session.is_finished(nonce);
        let judged = settle::judge(&msg.report.end, finished, msg.report.crowned);
        if let Some(holds) = judged.host_holds {
            sync::rewind(&mut self.session, &self.deps, &msg.host, holds);
            self.durable.syncs_changed();
        }
        let (class, reason) = (judged.class, judged.reason);
        self.reach_attempt_ended(&msg.host, &msg.report.end, class, reason, ctx);
        self.reach_caught_up(&msg.host, nonce, false, ctx);
        if !self
            .book
            .ended(nonce, msg.report.timings, msg.report.crowned)
        {
            return MessageResult(AttemptVerdict::default());
        }
        let mut verdict = AttemptVerdict {
            retry: judged.retry,
            shared_fault: None,
            shared_class: None,
            host_paused: Refusal::of(reason).is_some_and(Refusal::is_pause),
        };
        match class {
            OutcomeClass::PendingFinish => {
                let first_poll = self.deps.cfg.finish_poll_initial_ms;
                self.book.pending_finish(nonce, self.now_ms(), first_poll);
                info!(self.deps.log, "whole answer delivered, finish marker pending";
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
                let details = settle::end_details(&msg.report.end);
                if let Some(shared) = self.emit_failure(nonce, class, reason, details, ctx) {
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

impl Handler<HealthChanged> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: HealthChanged, ctx: &mut Self::Context) {
        let health = HostHealth {
            health: msg.health,
            perf: msg.perf,
            routable: msg.routable,
        };
        if self.routing.set_health(msg.address, health) {
            let now = self.now_ms();
            self.reach_gate(now);
            self.pump(ctx);
        }
    }
}

impl Handler<ApplyHealthSettings> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: ApplyHealthSettings, _: &mut Self::Context) {
        self.guard.set_settings(&msg.0);
        self.deps.settings = Arc::clone(&msg.0);
    }
}

impl Handler<Retire> for EscrowActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Self::Context) {
        self.retired = true;
        ctx.stop();
    }
}

impl Handler<GetSnapshot> for EscrowActor {
    type Result = MessageResult<GetSnapshot>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Self::Context) -> Self::Result {
        let sm = self.session.state();
        let (attempts_in_flight, pending_finishes, pending_timeouts) = self.book.snapshot();
        let (repairs, repairs_given_up, panic_mode, withheld) = self.routing.snapshot();
        MessageResult(EscrowSnapshot {
            escrow_id: self.escrow_id().to_string(),
            model: self.session.info().model.clone(),
            nonce: self.session.nonce(),
            phase: format!("{:?}", sm.phase()).to_lowercase(),
            state_root: hex::encode(sm.state_root()),
            balance: sm.balance(),
            durable_nonce: self.durable.durable_nonce(),
            host_sync: (self.session.host_syncs().iter())
                .map(|(a, n)| (a.to_string(), *n))
                .collect(),
            pending_txs: self.session.pending().len(),
            waiting_races: self.picker.len(),
            attempts_in_flight,
            unsettled: self.book.len(),
            pending_finishes,
            pending_timeouts,
            repairs,
            repairs_given_up,
            withheld,
            panic_mode,
            signatures: (self.session.signatures().iter())
                .map(|(a, s)| (a.to_string(), s.nonce))
                .collect(),
            warm_keys: self.session.warm_keys().clone(),
            links: self.durable.links(),
            reach: self.reach.view(),
        })
    }
}

impl Handler<InjectPanic> for EscrowActor {
    type Result = ();

    #[allow(clippy::panic)]
    fn handle(&mut self, _: InjectPanic, _: &mut Self::Context) {
        if self.deps.fault_injection {
            panic!(
                "fault injection: escrow {} panics on request",
                self.escrow_id()
            );
        }
    }
}

impl Handler<InjectStall> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: InjectStall, ctx: &mut Self::Context) {
        if self.deps.fault_injection {
            warn!(self.deps.log, "fault injection: the mailbox stalls"; "stage" => "fault_injected",
                "stall_ms" => msg.ms);
            let stall = tokio::time::sleep(Duration::from_millis(msg.ms));
            ctx.wait(stall.into_actor(self));
        }
    }
}

impl EscrowActor {
    /// First detection of divergence of `host`: withhold it here and start its repair (once).
    fn start_repair(&mut self, host: &Address, ctx: &mut Context<Self>) {
        if self.routing.is_repairing(host) {
            return;
        }
        let escrow = self.tracked_address(ctx);
        repair::start(&mut self.routing, &self.session, &self.deps, host, escrow);
    }
}
