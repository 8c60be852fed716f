//! `RepairActor`: one per (escrow, diverged participant) — the repair loop of docs/health.md §6.
//!
//! Each tick teaches the host the escrow's canonical diffs by catch-up (payload-less sends, only
//! durable diffs, admission-free), then fetches `GET …/signatures?nonce=N` and has the escrow
//! verify a signature by that participant over our root at N. Only a verified signature clears
//! the block (`escrow_participant_state_unblocked`); a 200 on catch-up never does. `session not
//! found` (or a nonce gap) resets the host's sync nonce so the next tick replays from nonce 1.
//!
//! - **Owns**: the loop's progress (attempts, last result, next tick).
//! - **Survives a restart**: nothing; the escrow starts a new one if the participant is still
//!   diverged (the block itself is the escrow's).
//! - **Timers**: `repair_tick`, the next tick — first after 2 s, then 15 s → 30 s → 60 s → 300 s
//!   (±20 %), or at once on `RepairUrgently` (the escrow has no routable host); it gives up after `repair_give_up_ms` (1 h) and the participant stays blocked until
//!   `forget` or restart. Shown with its due time in the actor's stats.
//! - **Who holds its `Addr`**: its escrow only (a counted [`TrackedAddr`]); it stops with the
//!   escrow. Listed in the actor registry as `repair` `<escrow>/<participant>`.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{info, o, warn, Logger};

use super::messages::{
    GetRepairState, PlanRepair, RepairGaveUp, RepairNow, RepairPlan, RepairState, RepairStep,
    RepairUrgently, RepairVerdict, StopRepair,
};
use crate::{
    clock::SharedClock,
    escrow::EscrowActor,
    host::{client, HostError, Rejection},
    metrics::ActorMetrics,
    policy::{backoff, settings::HealthSettings},
    protocol::{crypto::Address, sse::HostEvent},
    stats::{
        timers::{self, Timer},
        tracked_actor, ActorRegistry, Kind, StatsSlot, TrackedAddr,
    },
};

/// Timeout of each repair call.
const REPAIR_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a repair actor is given by its escrow.
pub struct RepairDeps {
    pub escrow: TrackedAddr<EscrowActor>,
    pub clock: SharedClock,
    pub log: Logger,
    pub metrics: ActorMetrics,
    pub settings: Arc<HealthSettings>,
    pub actors: ActorRegistry,
}

/// The repair actor (see the module docs).
pub struct RepairActor {
    escrow: TrackedAddr<EscrowActor>,
    participant: Address,
    slots: Vec<u32>,
    clock: SharedClock,
    log: Logger,
    metrics: ActorMetrics,
    settings: Arc<HealthSettings>,
    started_ms: i64,
    attempts: u32,
    last_result: String,
    next_tick_ms: Option<i64>,
    timer: Option<Timer>,
    running: bool,
    gave_up: bool,
    stats: StatsSlot,
}

impl RepairActor {
    /// A repair of `participant` (holding `slots`) in escrow `escrow_id` (behind `deps.escrow`).
    pub fn new(
        deps: RepairDeps,
        escrow_id: &str,
        participant: Address,
        slots: Vec<u32>,
    ) -> RepairActor {
        let started_ms = deps.clock.now_ms();
        let labels = [
            ("escrow", escrow_id.to_string()),
            ("participant", participant.to_string()),
        ]
        .into_iter()
        .collect();
        let id = format!("{escrow_id}/{participant}");
        let stats = deps
            .actors
            .register_with(Kind::Repair, id, labels, &deps.clock);
        RepairActor {
            escrow: deps.escrow,
            log: deps.log.new(
                o!("escrow" => escrow_id.to_string(), "host" => participant.short().to_string()),
            ),
            participant,
            slots,
            clock: deps.clock,
            metrics: deps.metrics,
            settings: deps.settings,
            stats,
            started_ms,
            attempts: 0,
            last_result: "started".into(),
            next_tick_ms: None,
            timer: None,
            running: false,
            gave_up: false,
        }
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let draw = rand::random::<f64>() * 2.0 - 1.0;
        let delay = backoff::repair_delay_ms(self.attempts, draw).max(0);
        self.next_tick_ms = Some(self.clock.now_ms().saturating_add(delay));
        if let Some(t) = self.timer.take() {
            t.cancel(&self.stats, ctx);
        }
        let delay = Duration::from_millis(u64::try_from(delay).unwrap_or(0));
        let timer = timers::run_later(&self.stats, ctx, "repair_tick", delay, |act, ctx| {
            act.timer = None;
            act.tick(ctx);
        });
        self.timer = Some(timer);
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.running || self.gave_up {
            return;
        }
        if backoff::repair_gave_up(self.started_ms, self.clock.now_ms(), &self.settings) {
            self.gave_up = true;
            self.next_tick_ms = None;
            warn!(self.log, "repair gave up; the participant stays blocked until forget or restart";
                "stage" => "escrow_participant_state_repair_gave_up", "attempts" => self.attempts);
            self.metrics
                .repair_attempts
                .with_label_values(&["gave_up"])
                .inc();
            self.escrow.do_send(RepairGaveUp {
                participant: self.participant.clone(),
            });
            return;
        }
        self.running = true;
        self.attempts += 1;
        let (escrow, participant, slots) = (
            self.escrow.clone(),
            self.participant.clone(),
            self.slots.clone(),
        );
        let chunks = self.metrics.catch_up_chunks.clone();
        let fut = async move { run_tick(escrow, participant, slots, chunks).await };
        ctx.spawn(fut.into_actor(self).map(|(result, unblocked), act, ctx| {
            act.running = false;
            act.metrics
                .repair_attempts
                .with_label_values(&[if unblocked { "unblocked" } else { "not_yet" }])
                .inc();
            info!(act.log, "repair attempt"; "stage" => "escrow_participant_state_repair_attempt",
                "attempt" => act.attempts, "result" => &result);
            act.last_result = result;
            if unblocked {
                let after = act.clock.now_ms().saturating_sub(act.started_ms);
                act.metrics
                    .repair_unblock_seconds
                    .observe(after as f64 / 1000.0);
                info!(act.log, "participant unblocked by a verified signature";
                    "stage" => "escrow_participant_state_unblocked", "after_ms" => after);
                ctx.stop();
            } else {
                act.schedule(ctx);
            }
        }));
    }
}

/// One tick: plan, catch-up, signature check. Returns (result text, unblocked).
async fn run_tick(
    escrow: TrackedAddr<EscrowActor>,
    participant: Address,
    slots: Vec<u32>,
    chunks: prometheus::IntCounterVec,
) -> (String, bool) {
    let plan: RepairPlan = match escrow
        .send(PlanRepair {
            participant: participant.clone(),
        })
        .await
    {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return (format!("no plan: {e}"), false),
        Err(_) => return ("escrow gone".into(), false),
    };
    for chunk in plan.chunks.chunks() {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => return (format!("catch-up not read from the store: {e}"), false),
        };
        let sent = catch_up(&plan.chat_url, &chunk, &plan.signer).await;
        let result = crate::race::sends::chunk_result(sent.as_ref().err());
        chunks.with_label_values(&["repair", result]).inc();
        match sent {
            Ok(Some(receipt)) => {
                let step = RepairStep::CatchUp {
                    participant: participant.clone(),
                    receipt,
                };
                if let Ok(Err(e)) = escrow.send(step).await {
                    return (format!("still diverged: {e}"), false);
                }
            }
            Ok(None) => {}
            Err(e) if e.rejection().and_then(Rejection::host_holds).is_some() => {
                let holds = e.rejection().and_then(Rejection::host_holds).unwrap_or(0);
                let _ = escrow
                    .send(RepairStep::HostBehind {
                        participant: participant.clone(),
                        holds,
                    })
                    .await;
                return (
                    format!("host holds nonce {holds}; replaying from there next tick"),
                    false,
                );
            }
            Err(e) => return (format!("catch-up failed: {e}"), false),
        }
    }
    let url = format!("{}?nonce={}", plan.signatures_url, plan.target_nonce);
    let sigs = match client::get_signatures(&url, REPAIR_CALL_TIMEOUT).await {
        Ok(s) => s.signatures.unwrap_or_default(),
        Err(e) if matches!(e.rejection(), Some(Rejection::SessionNotFound)) => {
            let _ = escrow
                .send(RepairStep::HostBehind {
                    participant: participant.clone(),
                    holds: 0,
                })
                .await;
            return (
                "host lost its session; replaying from nonce 1 next tick".into(),
                false,
            );
        }
        Err(e) => return (format!("signatures fetch failed: {e}"), false),
    };
    let Some(signature) = slots.iter().find_map(|s| sigs.get(s).cloned()) else {
        return (
            format!("no signature at nonce {}", plan.target_nonce),
            false,
        );
    };
    let step = RepairStep::Signature {
        participant,
        nonce: plan.target_nonce,
        signature,
    };
    match escrow.send(step).await {
        Ok(Ok(RepairVerdict::Unblocked)) => (
            format!(
                "signature over our root at nonce {} verified",
                plan.target_nonce
            ),
            true,
        ),
        Ok(Ok(RepairVerdict::Continue)) => ("signature not accepted yet".into(), false),
        Ok(Err(e)) => (format!("signature rejected: {e}"), false),
        Err(_) => ("escrow gone".into(), false),
    }
}

/// Sends one catch-up chunk and returns its receipt.
async fn catch_up(
    url: &str,
    chunk: &bytes::Bytes,
    signer: &crate::host::RequestSigner,
) -> Result<Option<crate::protocol::wire::ReceiptBody>, HostError> {
    let mut s = client::open_inference(url, chunk.clone(), signer, REPAIR_CALL_TIMEOUT).await?;
    let mut parser_receipt = None;
    while let Some(events) = s.next_events().await? {
        for e in events {
            if let HostEvent::Receipt(r) = e {
                parser_receipt = Some(r);
            }
        }
    }
    Ok(parser_receipt)
}

impl Actor for RepairActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.metrics.repairs_active.inc();
        info!(self.log, "repair started"; "stage" => "escrow_participant_state_repair_started");
        self.schedule(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.metrics.repairs_active.dec();
    }
}

tracked_actor!(RepairActor);

impl Handler<RepairNow> for RepairActor {
    type Result = ();

    fn handle(&mut self, _: RepairNow, ctx: &mut Self::Context) {
        if let Some(t) = self.timer.take() {
            t.cancel(&self.stats, ctx);
        }
        self.gave_up = false;
        self.tick(ctx);
    }
}

impl Handler<RepairUrgently> for RepairActor {
    type Result = ();

    fn handle(&mut self, _: RepairUrgently, ctx: &mut Self::Context) {
        if self.running || self.gave_up {
            return;
        }
        if let Some(t) = self.timer.take() {
            t.cancel(&self.stats, ctx);
        }
        info!(self.log, "no routable host in the escrow; repair tick now";
            "stage" => "escrow_participant_state_repair_urgent", "attempt" => self.attempts + 1);
        self.tick(ctx);
    }
}

impl Handler<StopRepair> for RepairActor {
    type Result = ();

    fn handle(&mut self, _: StopRepair, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<GetRepairState> for RepairActor {
    type Result = MessageResult<GetRepairState>;

    fn handle(&mut self, _: GetRepairState, _: &mut Self::Context) -> Self::Result {
        MessageResult(RepairState {
            participant: self.participant.clone(),
            blocked_since_ms: self.started_ms,
            attempts: self.attempts,
            last_result: self.last_result.clone(),
            next_tick_ms: self.next_tick_ms,
            gave_up: self.gave_up,
        })
    }
}
