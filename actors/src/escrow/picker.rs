//! The nonce picker: binds upcoming nonces to waiting races (PROTOCOL.md §6.2, HEALTH.md §4).
//!
//! The next nonce's host is fixed (`nonce % N`). The first waiting race that has not tried that
//! host takes it. A nonce whose host is withheld by our choice (ejected, under repair) becomes a
//! diff without `MsgStartInference`. A nonce every waiting race already tried waits
//! `picker_hold_ms` for a new taker, then is withheld too.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use bytes::Bytes;
use slog::{debug, error};
use tokio::sync::oneshot;

use super::{
    actor::{EscrowActor, Waiter},
    attempt::AttemptTimings,
    error::EscrowError,
    info::HostEndpoint,
    messages::{AttemptKind, NonceGrant, RaceGone, RequestNonce, SignedBody, VerifyContext},
    nonces::{NonceEntry, NonceState},
    session::StartParams,
};
use crate::{
    policy::reason::{EmptyDiffReason, OutcomeReason},
    protocol::{auth, diff::Diff, state::Phase, wire::PayloadJson},
    stats::timers,
    store::Ack,
};

impl Handler<RequestNonce> for EscrowActor {
    type Result = ResponseFuture<Result<NonceGrant, EscrowError>>;

    fn handle(&mut self, msg: RequestNonce, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let id = self.escrow_id().to_string();
        if self.waiting.len() >= self.cfg.max_waiting {
            return Box::pin(async move { Err(EscrowError::Saturated(id)) });
        }
        let waiter = Waiter {
            race_id: msg.race_id,
            params: msg.params,
            exclude: msg.exclude,
            kind: msg.kind.clone(),
            reply: tx,
        };
        match msg.kind {
            AttemptKind::Hedge(req) if self.refusal().is_none() => self.hedge(waiter, req, ctx),
            AttemptKind::Pair if self.refusal().is_none() => self.pair(waiter, ctx),
            kind => {
                if kind == AttemptKind::Primary {
                    self.budget.on_request(&self.settings);
                    self.metrics.hedge_tokens.set(self.budget.tokens());
                }
                self.waiting.push_back(waiter);
                self.pump(ctx);
            }
        }
        Box::pin(async move { rx.await.unwrap_or(Err(EscrowError::ShuttingDown(id))) })
    }
}

impl Handler<RaceGone> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: RaceGone, _: &mut Self::Context) {
        self.waiting.retain(|w| w.race_id != msg.race_id);
    }
}

impl EscrowActor {
    /// Why no new inference can start, if so.
    pub(super) fn refusal(&self) -> Option<EscrowError> {
        let id = self.escrow_id().to_string();
        if self.session.state().phase() != Phase::Active {
            return Some(EscrowError::NotActive(id));
        }
        if self.session.nonce() >= self.session.info().last_active_nonce() {
            return Some(EscrowError::NonceLimit(id));
        }
        let distinct = self.session.info().hosts.len();
        if distinct > 0 && self.withheld.len() >= distinct {
            return Some(EscrowError::NoRoutableHost(id));
        }
        None
    }

    /// Hands out nonces while there are waiting races that can take them.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        self.waiting.retain(|w| !w.reply.is_closed());
        while !self.waiting.is_empty() {
            if let Some(err) = self.refusal() {
                for w in self.waiting.drain(..) {
                    let _ = w.reply.send(Err(err.clone()));
                }
                return;
            }
            let next = self.session.nonce().saturating_add(1);
            let Some(host) = self
                .session
                .info()
                .host_for_nonce(next)
                .map(|h| h.address.clone())
            else {
                return;
            };
            if self.gave_up.contains(&host) {
                if !self.compose_ghost(&host, ctx) {
                    return;
                }
                continue;
            }
            if self.withheld.contains(&host) {
                match self.compose_withheld(EmptyDiffReason::HostWithheld) {
                    Some((diff, ack)) => self.watch_ack(diff.nonce, ack, ctx),
                    None => return,
                }
                continue;
            }
            self.fail_exhausted_waiters();
            match self.waiting.iter().position(|w| !w.exclude.contains(&host)) {
                Some(i) => {
                    if let Some(w) = self.waiting.remove(i) {
                        self.cancel_hold(ctx);
                        self.grant(w, ctx);
                    }
                }
                None => {
                    self.arm_hold(ctx);
                    return;
                }
            }
        }
        self.cancel_hold(ctx);
    }

    /// Races that tried every routable host get a clear error instead of waiting forever.
    fn fail_exhausted_waiters(&mut self) {
        let routable: Vec<_> = self
            .session
            .info()
            .hosts
            .iter()
            .filter(|h| !self.withheld.contains(&h.address))
            .map(|h| h.address.clone())
            .collect();
        let id = self.escrow_id().to_string();
        let (exhausted, keep): (Vec<_>, Vec<_>) = self
            .waiting
            .drain(..)
            .partition(|w| routable.iter().all(|h| w.exclude.contains(h)));
        self.waiting = keep.into();
        for w in exhausted {
            let _ = w.reply.send(Err(EscrowError::AllHostsTried(id.clone())));
        }
    }

    fn arm_hold(&mut self, ctx: &mut Context<Self>) {
        if self.hold_timer.is_some() {
            return;
        }
        let hold = Duration::from_millis(self.cfg.picker_hold_ms);
        let timer = timers::run_later(&self.stats, ctx, "picker_hold", hold, Self::hold_expired);
        self.hold_timer = Some(timer);
    }

    fn hold_expired(&mut self, ctx: &mut Context<Self>) {
        self.hold_timer = None;
        let next = self.session.nonce().saturating_add(1);
        let host = self
            .session
            .info()
            .host_for_nonce(next)
            .map(|h| h.address.clone());
        let still_blocked = host.is_some_and(|h| {
            !self.waiting.is_empty() && self.waiting.iter().all(|w| w.exclude.contains(&h))
        });
        if still_blocked {
            if let Some((diff, ack)) = self.compose_withheld(EmptyDiffReason::NoTaker) {
                self.watch_ack(diff.nonce, ack, ctx);
            }
        }
        self.pump(ctx);
    }

    fn cancel_hold(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.hold_timer.take() {
            t.cancel(&self.stats, ctx);
        }
    }

    /// Sequences the next nonce as a diff without `MsgStartInference` (pending txs only). It costs
    /// the per-nonce fee but assigns the host no work it could be charged for. Returns the diff
    /// and its durability ack.
    pub(super) fn compose_withheld(&mut self, reason: EmptyDiffReason) -> Option<(Arc<Diff>, Ack)> {
        let key = self.key.clone();
        match self.session.compose(Vec::new(), &key) {
            Ok(diff) => {
                let kind = reason.nonce_kind();
                self.metrics.nonces.with_label_values(&[kind]).inc();
                debug!(self.log, "diff without inference composed"; "stage" => "diff_composed",
                    "nonce" => diff.nonce, "reason" => reason.as_str());
                let ack = self.store.append_diff(self.escrow_id(), &diff);
                Some((diff, ack))
            }
            Err(e) => {
                error!(self.log, "compose failed"; "stage" => "compose_failed", "error" => %e);
                None
            }
        }
    }

    /// Watches a durability ack nobody waits for; a store failure stops the actor (the directory
    /// respawns it from the last durable state, so an undurable nonce is never used).
    pub(super) fn watch_ack(&mut self, nonce: u64, ack: Ack, ctx: &mut Context<Self>) {
        ctx.spawn(ack.into_actor(self).map(move |res, act, ctx| match res {
            Ok(()) => act.durable_nonce = act.durable_nonce.max(nonce),
            Err(e) => {
                error!(act.log, "diff not durable; stopping escrow"; "stage" => "store_error",
                    "nonce" => nonce, "error" => %e);
                ctx.stop();
            }
        }));
    }

    pub(super) fn grant(&mut self, w: Waiter, ctx: &mut Context<Self>) {
        let started_at = self.clock.now_unix();
        let params = StartParams {
            prompt_hash: w.params.prompt_hash,
            model: w.params.model.clone(),
            input_length: u64::try_from(w.params.body.len()).unwrap_or(u64::MAX),
            max_tokens: w.params.max_tokens,
            started_at,
        };
        let key = self.key.clone();
        let diff = match self.session.compose_start(&params, &key) {
            Ok(d) => d,
            Err(e) => {
                let _ = w.reply.send(Err(e.into()));
                return;
            }
        };
        let nonce = diff.nonce;
        self.metrics.nonces.with_label_values(&["inference"]).inc();
        let composed = std::time::Instant::now();
        let ack = self.store.append_diff(self.escrow_id(), &diff);
        let info = self.session.info().clone();
        let Some(host) = info.host_for_nonce(nonce).cloned() else {
            let _ = w
                .reply
                .send(Err(EscrowError::NoRoutableHost(info.escrow_id.clone())));
            return;
        };
        let payload = PayloadJson {
            prompt: w.params.body.to_vec(),
            model: params.model.clone(),
            input_length: params.input_length,
            max_tokens: params.max_tokens,
            started_at,
        };
        let primary = w.kind == AttemptKind::Primary;
        let grant = match self.build_grant(&host, nonce, payload.clone(), started_at, primary) {
            Ok(g) => g,
            Err(e) => {
                let _ = w.reply.send(Err(e));
                return;
            }
        };
        let now_ms = self.now_ms();
        self.attempts.insert(
            nonce,
            NonceEntry {
                nonce,
                host: host.address.clone(),
                race_id: Some(w.race_id),
                request_id: w.params.request_id.clone(),
                started_at,
                confirmed_at: None,
                payload: Some(payload),
                timings: AttemptTimings {
                    send_ms: now_ms,
                    end_ms: now_ms,
                    input_bytes: params.input_length,
                    ..Default::default()
                },
                state: NonceState::InFlight,
                crowned: false,
                emitted: false,
            },
        );
        let fut = ack.into_actor(self).map(move |res, act, ctx| match res {
            Ok(()) => {
                act.durable_nonce = act.durable_nonce.max(nonce);
                act.metrics
                    .diff_durable_seconds
                    .observe(composed.elapsed().as_secs_f64());
                if w.reply.send(Ok(grant)).is_err() {
                    act.unclaimed(nonce, ctx);
                }
            }
            Err(e) => {
                error!(act.log, "diff not durable; stopping escrow"; "stage" => "store_error",
                    "nonce" => nonce, "error" => %e);
                let _ = w.reply.send(Err(e.into()));
                ctx.stop();
            }
        });
        ctx.spawn(fut);
    }

    /// Signed request bodies for one attempt: catch-up chunks the host needs first (when it is
    /// more than one chunk behind), then the inference request ending with this nonce's diff.
    fn build_grant(
        &self,
        host: &HostEndpoint,
        nonce: u64,
        payload: PayloadJson,
        now_unix: i64,
        primary: bool,
    ) -> Result<NonceGrant, EscrowError> {
        let input_bytes = payload.input_length;
        let info = self.session.info();
        let chunk = self.cfg.catch_up_chunk.max(1);
        let pending: Vec<Arc<Diff>> = self.session.catch_up(&host.address, usize::MAX);
        let split = pending.len().saturating_sub(chunk);
        let (before, last) = pending.split_at(split);
        let prelude = self.catch_up_chunks(before, now_unix)?;
        let body = self
            .wire
            .body(last.iter().map(|d| &**d), nonce, Some(&payload));
        Ok(NonceGrant {
            nonce,
            host: host.address.clone(),
            url: info.session_url(host, "chat/completions"),
            prelude,
            request: self.sign_bytes(body, now_unix)?,
            preference: self.preference(&host.address),
            hedge_due_ms: primary
                .then(|| self.hedge_due(&host.address, input_bytes, self.now_ms()))
                .flatten(),
            healthy_available: self.healthy_available(),
            verify: VerifyContext {
                escrow_id: Arc::from(self.escrow_id()),
                start: self.session.start_of(nonce),
            },
        })
    }

    /// Signed payload-less catch-up sends of `diffs`, `catch_up_chunk` diffs each,
    /// each targeting the last nonce it carries.
    pub(super) fn catch_up_chunks(
        &self,
        diffs: &[Arc<Diff>],
        now_unix: i64,
    ) -> Result<Vec<SignedBody>, EscrowError> {
        diffs
            .chunks(self.cfg.catch_up_chunk.max(1))
            .map(|part| {
                let last_nonce = part.last().map_or(0, |d| d.nonce);
                let body = self.wire.body(part.iter().map(|d| &**d), last_nonce, None);
                self.sign_bytes(body, now_unix)
            })
            .collect()
    }

    /// Signs an already serialised request body for this escrow.
    pub(super) fn sign_bytes(
        &self,
        body: Result<Vec<u8>, serde_json::Error>,
        now_unix: i64,
    ) -> Result<SignedBody, EscrowError> {
        let body = body.map_err(|e| EscrowError::Protocol(e.to_string()))?;
        let headers = auth::sign_request(
            &self.key,
            self.escrow_id(),
            &body,
            u64::try_from(now_unix).unwrap_or(0),
        );
        Ok(SignedBody {
            body: Bytes::from(body),
            signature_hex: headers.signature_hex,
            timestamp: headers.timestamp,
        })
    }
}

impl Handler<crate::escrow::messages::GrantUnused> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: crate::escrow::messages::GrantUnused, ctx: &mut Self::Context) {
        self.unclaimed(msg.nonce, ctx);
    }
}

impl EscrowActor {
    /// A granted nonce nobody will send: no host was given work, so no health outcome; the
    /// protocol still settles it (a refused-timeout vote at its deadline refunds the reserve).
    pub(super) fn unclaimed(&mut self, nonce: u64, ctx: &mut Context<Self>) {
        if let Some(entry) = self.attempts.get_mut(&nonce) {
            if entry.is_in_flight() {
                entry.emitted = true;
                entry.race_id = None;
                self.await_timeout(nonce, OutcomeReason::GrantUnclaimed, ctx);
            }
        }
    }
}
