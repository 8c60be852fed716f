//! `SettlementActor`: one per escrow being settled. Owns the escrow's [`SettlementRecord`] and
//! drives it through draining → finalizing → collecting → broadcast → settled (+ retrying).
//!
//! - **Survives a restart**: the record (namespace `settlement`, key = escrow id), written and
//!   acknowledged durable *before* each step acts — including the signed tx bytes before their
//!   first broadcast. On start the actor loads it and resumes the step it names: a broadcast
//!   re-sends the same bytes; a retry waits out what is left of its back-off. Nothing else is
//!   trusted from memory (the chain id and account number are fetched again when needed).
//! - **Timers**: one at a time — the retry back-off (`RETRY_FIRST_MS` doubling to
//!   `RETRY_MAX_MS`), and inside a broadcast step the 2 s confirmation poll for up to 45 s.
//! - **Never two live txs**: a new tx is signed only when the current one can no longer commit
//!   (see [`super::machine`]).
//! - **One driver**: every record write is fenced by the escrow's lease (`Store::put_fenced`;
//!   several replicas on PostgreSQL): an actor whose replica lost the escrow stops at its next
//!   transition (stage `settlement_lease_lost`), before the step acts.

use std::{rc::Rc, time::Duration};

use actix::prelude::*;
use slog::{info, warn, Logger};

use super::{
    chain::ChainTxClient,
    collect::collect,
    machine::{retry_delay_ms, RetryStep, SettlementRecord, SettlementState},
    metrics::SettlementMetrics,
    port::EscrowSteps,
    steps::{broadcast_step, sign_step, StepEnd},
};
use crate::{
    clock::SharedClock,
    escrow::EscrowInfo,
    protocol::{
        cosmos::{SignedTx, TxSettings},
        crypto::SigningKey,
        tx_timeout::TxTimeout,
    },
    store::{SharedStore, StoreError},
};

/// Record namespace of settlements (key = escrow id).
pub const NS_SETTLEMENT: &str = "settlement";
/// Attempts after which each further failure is logged as `settlement_failed`.
const LOUD_AFTER_ATTEMPTS: u32 = 5;

/// What a settlement actor is given.
#[derive(Clone)]
pub struct SettlementDeps {
    pub store: SharedStore,
    pub clock: SharedClock,
    pub log: Logger,
    pub chain: ChainTxClient,
    pub key: SigningKey,
    pub tx: TxSettings,
    pub metrics: Option<SettlementMetrics>,
    /// Timeout of host signature queries.
    pub query_timeout: Duration,
}

/// Loads the persisted record of an escrow, if any.
pub fn load_record(store: &SharedStore, escrow_id: &str) -> Option<SettlementRecord> {
    let v = store.get(NS_SETTLEMENT, escrow_id).ok()??;
    serde_json::from_value(v).ok()
}

pub struct SettlementActor {
    pub(super) info: EscrowInfo,
    steps: Rc<dyn EscrowSteps>,
    pub(super) deps: SettlementDeps,
    pub(super) record: Option<SettlementRecord>,
    busy: bool,
}

/// Starts (or joins) the settlement; `broadcast: false` stops at the payload.
#[derive(Message)]
#[rtype(result = "Option<SettlementRecord>")]
pub struct StartSettlement {
    pub broadcast: bool,
}

/// The current record (`None` while the escrow is active).
#[derive(Message)]
#[rtype(result = "Option<SettlementRecord>")]
pub struct GetSettlement;

impl SettlementActor {
    pub fn new(info: EscrowInfo, steps: Rc<dyn EscrowSteps>, deps: SettlementDeps) -> Self {
        let record = load_record(&deps.store, &info.escrow_id);
        SettlementActor {
            info,
            steps,
            deps,
            record,
            busy: false,
        }
    }

    pub(super) fn now_ms(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Persists `state` and, once durable, runs the step it names.
    pub(super) fn transition(&mut self, state: SettlementState, ctx: &mut Context<Self>) {
        let now = self.now_ms();
        let Some(record) = self.record.as_mut() else {
            return;
        };
        record.state = state;
        record.updated_ms = now;
        if let Some(m) = &self.deps.metrics {
            m.set_state(&record.escrow_id, &record.state);
        }
        let value = serde_json::to_value(&*record).unwrap_or_default();
        // Fenced by the escrow's lease: only the replica that owns the escrow drives it.
        let ack =
            self.deps
                .store
                .put_fenced(&record.escrow_id, NS_SETTLEMENT, &record.escrow_id, value);
        self.busy = true;
        ctx.spawn(ack.into_actor(self).map(|res, act, ctx| {
            act.busy = false;
            match res {
                Ok(()) => act.kick(ctx),
                // Another replica took the escrow over: it drives the settlement from here.
                Err(e @ StoreError::LeaseLost { .. }) => {
                    warn!(act.deps.log, "settlement stopped: the escrow's lease is lost";
                        "stage" => "settlement_lease_lost", "escrow" => &act.info.escrow_id,
                        "error" => %e);
                    if let Some(m) = &act.deps.metrics {
                        m.settlements.with_label_values(&["lease_lost"]).inc();
                    }
                    ctx.stop();
                }
                // Not durable: stop; the directory respawns from the last durable record.
                Err(e) => {
                    warn!(act.deps.log, "settlement record not persisted";
                        "stage" => "settlement_failed", "escrow" => &act.info.escrow_id,
                        "error" => %e);
                    ctx.stop();
                }
            }
        }));
    }

    pub(super) fn retry(
        &mut self,
        step: RetryStep,
        tx: Option<SignedTx>,
        error: String,
        ctx: &mut Context<Self>,
    ) {
        let now = self.now_ms();
        let Some(record) = self.record.as_mut() else {
            return;
        };
        record.attempts += 1;
        let delay = retry_delay_ms(record.attempts);
        let stage = if record.attempts >= LOUD_AFTER_ATTEMPTS {
            "settlement_failed"
        } else {
            "settlement_retry"
        };
        warn!(self.deps.log, "settlement step will be retried";
            "stage" => stage, "escrow" => &record.escrow_id, "step" => ?step,
            "attempts" => record.attempts, "delay_ms" => delay, "error" => &error);
        record.last_error = Some(error);
        if let Some(m) = &self.deps.metrics {
            let label = match step {
                RetryStep::Collecting => "collecting",
                RetryStep::Broadcast => "broadcast",
            };
            m.retries.with_label_values(&[label]).inc();
        }
        let state = SettlementState::Retrying {
            step,
            next_at_ms: now + delay,
            tx,
        };
        self.transition(state, ctx);
    }

    /// Runs the step the record names (at most one at a time).
    fn kick(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        let Some(record) = self.record.clone() else {
            return;
        };
        let steps = Rc::clone(&self.steps);
        let fut: futures::future::LocalBoxFuture<'static, Result<StepEnd, String>> =
            match &record.state {
                SettlementState::Active | SettlementState::Settled { .. } => return,
                SettlementState::Draining => Box::pin(async move {
                    steps
                        .drain()
                        .await
                        .map(|()| StepEnd::Drained)
                        .map_err(|e| e.to_string())
                }),
                SettlementState::Finalizing { .. } => Box::pin(async move {
                    steps
                        .finalize_round()
                        .await
                        .map(StepEnd::Round)
                        .map_err(|e| e.to_string())
                }),
                SettlementState::Collecting { .. } => {
                    if record.payload.is_some() && !record.broadcast {
                        return; // finalized for an operator's own tools: done.
                    }
                    let info = self.info.clone();
                    let timeout = self.deps.query_timeout;
                    Box::pin(async move {
                        let fin = steps.final_state().await.map_err(|e| e.to_string())?;
                        let c = collect(&info, &fin, steps.as_ref(), timeout).await;
                        Ok(StepEnd::Collected(Box::new((fin, c))))
                    })
                }
                SettlementState::Retrying { next_at_ms, .. } => {
                    let wait = (*next_at_ms - self.now_ms()).max(0) as u64;
                    self.busy = true;
                    ctx.run_later(Duration::from_millis(wait), |act, ctx| {
                        act.busy = false;
                        act.resume(ctx);
                    });
                    return;
                }
                SettlementState::Broadcast { tx } => {
                    let (chain, tx) = (self.deps.chain.clone(), tx.clone());
                    let (id, clock) = (record.escrow_id.clone(), self.deps.clock.clone());
                    let maybe = record.maybe_in_mempool;
                    Box::pin(async move { Ok(broadcast_step(chain, tx, maybe, id, clock).await) })
                }
            };
        self.busy = true;
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            act.busy = false;
            act.step_done(res, ctx);
        }));
    }

    /// A retry's back-off is over: back to the step it retries (a broadcast without a tx
    /// signs a new one first).
    fn resume(&mut self, ctx: &mut Context<Self>) {
        let Some(record) = self.record.clone() else {
            return;
        };
        let SettlementState::Retrying { step, tx, .. } = record.state else {
            return self.kick(ctx);
        };
        match (step, tx) {
            (RetryStep::Collecting, _) => {
                let nonce = record.final_nonce.unwrap_or_default();
                self.transition(SettlementState::Collecting { nonce }, ctx);
            }
            (RetryStep::Broadcast, Some(tx)) => {
                self.transition(SettlementState::Broadcast { tx }, ctx)
            }
            (RetryStep::Broadcast, None) => self.sign(ctx),
        }
    }

    pub(super) fn sign(&mut self, ctx: &mut Context<Self>) {
        let Some(payload) = self.record.as_ref().and_then(|r| r.payload.clone()) else {
            return self.retry(
                RetryStep::Collecting,
                None,
                "no payload to sign".into(),
                ctx,
            );
        };
        let (chain, key, settings) = (
            self.deps.chain.clone(),
            self.deps.key.clone(),
            self.deps.tx.clone(),
        );
        let timeout = TxTimeout::unique(self.deps.clock.now_ms(), settings.timeout_s);
        self.busy = true;
        let fut = async move { sign_step(chain, key, settings, payload, timeout).await };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            act.busy = false;
            match res {
                Ok(tx) => act.on_step(StepEnd::Signed(tx), ctx),
                // Nothing was signed: the retry signs again (no tx can be live).
                Err(e) => act.retry(RetryStep::Broadcast, None, e, ctx),
            }
        }));
    }

    fn step_done(&mut self, res: Result<StepEnd, String>, ctx: &mut Context<Self>) {
        let Some(state) = self.record.as_ref().map(|r| r.state.clone()) else {
            return;
        };
        let id = self.info.escrow_id.clone();
        let end = match res {
            Ok(end) => end,
            Err(e) => {
                let (step, tx) = match state {
                    SettlementState::Broadcast { tx } => (RetryStep::Broadcast, Some(tx)),
                    SettlementState::Retrying { step, tx, .. } => (step, tx),
                    _ => (RetryStep::Collecting, None),
                };
                if matches!(
                    self.record.as_ref().map(|r| &r.state),
                    Some(SettlementState::Draining | SettlementState::Finalizing { .. })
                ) {
                    // Escrow steps retry in place.
                    if let Some(r) = self.record.as_mut() {
                        r.attempts += 1;
                        r.last_error = Some(e.clone());
                    }
                    warn!(self.deps.log, "escrow step failed; retrying";
                        "stage" => "settlement_retry", "escrow" => &id, "error" => &e);
                    let delay = retry_delay_ms(self.record.as_ref().map_or(1, |r| r.attempts));
                    self.busy = true;
                    ctx.run_later(Duration::from_millis(delay as u64), |act, ctx| {
                        act.busy = false;
                        act.kick(ctx);
                    });
                    return;
                }
                return self.retry(step, tx, e, ctx);
            }
        };
        self.on_step(end, ctx);
    }
}

impl Actor for SettlementActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let (Some(m), Some(r)) = (&self.deps.metrics, &self.record) {
            m.set_state(&r.escrow_id, &r.state);
        }
        self.kick(ctx);
    }
}

impl Handler<StartSettlement> for SettlementActor {
    type Result = Option<SettlementRecord>;

    fn handle(&mut self, msg: StartSettlement, ctx: &mut Self::Context) -> Self::Result {
        let now = self.now_ms();
        match self.record.as_mut() {
            Some(r) => {
                // Joins the running settlement; a broadcast request upgrades a finalize-only one.
                if msg.broadcast && !r.broadcast {
                    r.broadcast = true;
                    let state = r.state.clone();
                    if !self.busy {
                        self.transition(state, ctx);
                    }
                }
            }
            None => {
                info!(self.deps.log, "settlement started"; "stage" => "settlement_started",
                    "escrow" => &self.info.escrow_id, "broadcast" => msg.broadcast);
                self.record = Some(SettlementRecord::new(
                    &self.info.escrow_id,
                    msg.broadcast,
                    now,
                ));
                self.transition(SettlementState::Draining, ctx);
            }
        }
        self.record.clone()
    }
}

impl Handler<GetSettlement> for SettlementActor {
    type Result = Option<SettlementRecord>;

    fn handle(&mut self, _: GetSettlement, _: &mut Self::Context) -> Self::Result {
        self.record.clone()
    }
}
