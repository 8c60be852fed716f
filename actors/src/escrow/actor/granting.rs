//! Picking and granting nonces, one concern of the escrow actor: the pump that hands nonces to
//! waiting races over the picker's steps (grants, withheld and ghost diffs, the hold), and each
//! diff's durability ack. What each step means is decided by the parts (`picker.rs`,
//! `durable.rs`, `reach/mod.rs`); this file carries it out.

use std::time::Duration;

use actix::prelude::*;

use super::{
    super::{
        durable::{AfterAck, OnDurable, Pending},
        picker::{Step, Waiter},
    },
    EscrowActor,
};
use crate::{
    policy::reason::{EmptyDiffReason, OutcomeReason},
    protocol::crypto::Address,
    stats::timers,
    store::{Ack, StoreError},
};

impl EscrowActor {
    /// Hands out nonces while there are waiting races that can take them.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        self.publish_budget(None);
        self.picker.prune();
        if self.picker.len() > 0 {
            let now = self.now_ms();
            self.routing.kick_repairs(now);
        }
        loop {
            let now = self.now_ms();
            let reach = (&mut self.reach, now);
            match self
                .picker
                .next_step(&self.session, &self.routing, reach, self.book.len())
            {
                Step::Grant(w) => {
                    self.cancel_hold(ctx);
                    self.grant(w, ctx);
                }
                Step::Ghost(host) => {
                    if !self.ghost(&host, ctx) {
                        return;
                    }
                }
                Step::Withhold => {
                    if !self.withhold(EmptyDiffReason::HostWithheld, ctx) {
                        return;
                    }
                }
                Step::Unreachable => {
                    self.count_reach("withheld");
                    if !self.withhold(EmptyDiffReason::HostUnreachable, ctx) {
                        return;
                    }
                }
                Step::CatchingUp => {
                    self.count_reach("withheld_catching_up");
                    if !self.withhold(EmptyDiffReason::HostCatchingUp, ctx) {
                        return;
                    }
                }
                Step::CatchUpInBackground(host) => self.start_background_catch_up(&host, ctx),
                Step::RefusedCatchingUp(n) => {
                    let n = u64::try_from(n).unwrap_or(u64::MAX);
                    self.count_reach_by("refused_catching_up", n);
                    slog::debug!(self.deps.log, "requests refused without a nonce: every host that could serve is catching up in the background";
                        "stage" => "reach_refused_catching_up", "refused" => n);
                    return;
                }
                Step::RefusedUnreachable(n) => {
                    let n = u64::try_from(n).unwrap_or(u64::MAX);
                    self.count_reach_by("refused", n);
                    slog::debug!(self.deps.log, "waiting requests refused without a nonce: every host refuses";
                        "stage" => "reach_refused", "refused" => n);
                    return;
                }
                Step::Pass => {
                    if !self.withhold(EmptyDiffReason::NoTaker, ctx) {
                        return;
                    }
                }
                Step::Hold => return self.arm_hold(ctx),
                Step::Idle => return self.cancel_hold(ctx),
                Step::Stop => return,
            }
        }
    }

    pub(super) fn grant(&mut self, w: Waiter, ctx: &mut Context<Self>) {
        let request_id = w.params.request_id.clone();
        let granted = self
            .durable
            .grant(&mut self.session, &self.routing, &self.deps, w);
        self.publish_budget(Some(&request_id));
        if let Some((entry, pending)) = granted {
            let nonce = entry.nonce;
            self.reach_granted(&entry.host, nonce, &pending);
            self.book.insert(entry);
            self.book.keep_payload(nonce);
            self.await_durable(pending, ctx);
        }
    }

    /// Passes over `skip` nonces (diffs without inference) and grants the next one.
    pub(super) fn skip_then_grant(&mut self, (w, skip): (Waiter, u32), ctx: &mut Context<Self>) {
        for _ in 0..skip {
            if !self.withhold(EmptyDiffReason::HedgeSkip, ctx) {
                break;
            }
        }
        self.grant(w, ctx);
    }

    /// Sequences the next nonce without inference; `false` when nothing could be composed.
    pub(super) fn withhold(&mut self, reason: EmptyDiffReason, ctx: &mut Context<Self>) -> bool {
        let composed = self
            .durable
            .compose_withheld(&mut self.session, &self.deps, reason);
        let Some((diff, ack)) = composed else {
            return false;
        };
        let then = OnDurable::Nothing;
        self.await_durable(
            Pending {
                nonce: diff.nonce,
                ack,
                then,
            },
            ctx,
        );
        true
    }

    /// Sequences a ghost inference for a host whose repair gave up.
    pub(super) fn ghost(&mut self, host: &Address, ctx: &mut Context<Self>) -> bool {
        let book = &self.book;
        let composed = self
            .durable
            .compose_ghost(&mut self.session, &self.deps, host, |at| {
                book.ghost_deadline_ms(at)
            });
        let Some((entry, pending)) = composed else {
            return false;
        };
        let nonce = entry.nonce;
        self.await_durable(pending, ctx);
        self.book.insert(entry);
        self.book.keep_payload(nonce);
        self.arm_nonce_timer(nonce, ctx);
        true
    }

    /// Runs a diff's durability ack; what follows is decided by `durable.rs`.
    pub(super) fn await_durable(&mut self, p: Pending, ctx: &mut Context<Self>) {
        self.publish_budget(None);
        let Pending { nonce, ack, then } = p;
        ctx.spawn(ack.into_actor(self).map(move |res, act, ctx| {
            act.acked(nonce, res, then, ctx);
        }));
    }

    /// A diff composed for sends that must wait until it is durable (a sync, a vote's context,
    /// a finalize round): its ack is awaited here, as every composed diff's is, so the durable
    /// nonce moves on it and the finishes it sequenced leave the book; the sends wait for the
    /// flush returned, which resolves once it is durable too (writes commit in order). Found by
    /// a chaos run: an admin sync's diff sequenced a finish, its ack went only to the sync's
    /// sends, and the escrow drained forever with that finish in its book (CI's invariant 7).
    pub(super) fn durable_then_ready(
        &mut self,
        nonce: u64,
        ack: Ack,
        ctx: &mut Context<Self>,
    ) -> Ack {
        let then = OnDurable::Nothing;
        self.await_durable(Pending { nonce, ack, then }, ctx);
        self.deps.store.flush()
    }

    /// A diff whose ack was awaited elsewhere (a timeout's diff, sent once durable): as after
    /// [`Self::await_durable`] (seed 2624105436825454089: a finish it sequenced stayed in the book).
    pub(super) fn after_ack(
        &mut self,
        nonce: u64,
        res: Result<(), StoreError>,
        ctx: &mut Context<Self>,
    ) {
        self.acked(nonce, res, OnDurable::Nothing, ctx);
    }

    pub(super) fn acked(
        &mut self,
        nonce: u64,
        res: Result<(), StoreError>,
        then: OnDurable,
        ctx: &mut Context<Self>,
    ) {
        match self.durable.acked(&self.deps, nonce, res, then) {
            AfterAck::Done => self.release_durable_finishes(ctx),
            AfterAck::Unclaimed(nonce) => {
                self.release_durable_finishes(ctx);
                self.unclaimed(nonce, ctx);
            }
            AfterAck::Stop(cause) => {
                self.stop_cause = cause;
                ctx.stop();
            }
        }
    }

    /// A granted nonce nobody will send: no host was given work, so no health outcome; the
    /// protocol still settles it (a refused-timeout vote at its deadline refunds the reserve).
    pub(super) fn unclaimed(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        if let Some(host) = self.book.entry(nonce).map(|e| e.host.clone()) {
            self.reach_caught_up(&host, nonce, false, ctx);
        }
        if self.book.unclaimed(nonce) {
            self.await_timeout(nonce, OutcomeReason::GrantUnclaimed, ctx);
        }
    }

    pub(super) fn arm_hold(&mut self, ctx: &mut Context<Self>) {
        if self.picker.hold_armed() {
            return;
        }
        let hold = Duration::from_millis(self.deps.cfg.picker_hold_ms);
        let timer = timers::run_later(&self.stats, ctx, "picker_hold", hold, |act, ctx| {
            act.picker.take_hold();
            if act.picker.still_blocked(&act.session) {
                act.withhold(EmptyDiffReason::NoTaker, ctx);
            }
            act.pump(ctx);
        });
        self.picker.set_hold(timer);
    }

    pub(super) fn cancel_hold(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.picker.take_hold() {
            t.cancel(&self.stats, ctx);
        }
    }
}
