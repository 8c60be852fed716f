//! `ParticipantActor`: one per participant address, process-wide (shared by every escrow in which
//! the address holds slots). Runs the health state machine and the decayed perf estimates of
//! docs/health.md §2–§3 (pure functions in `policy`) over the final outcomes escrows send it.
//!
//! - **Owns**: the participant's record (health state, perf estimates, outcome counts, last 8
//!   strikes) and the latest view each escrow reported (for the floor and the relative-evidence
//!   rule).
//! - **Survives a restart**: the record is written to the store on every change (admin changes
//!   are durable before they answer) and reloaded when the directory respawns the actor.
//! - **Timers**: `health_tick`, one tick at the record's next deadline (strike decay to Healthy,
//!   ejection expiry into probation, probation time bound, level decay), re-armed in `started()`;
//!   shown with its due time in the actor's stats.
//! - **Who holds its `Addr`**: the `Directory` (a counted [`crate::stats::TrackedAddr`]), which
//!   routes outcomes and admin calls to it and forwards its `HealthChanged` notices to the escrows
//!   of the address.
//!   Admin, settings and fault-injection handlers are in `handlers.rs`.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{info, o, warn, Logger};

use super::{
    messages::{
        DecisionSink, GetParticipant, HealthChanged, HealthDecided, HealthDecision, ParticipantView,
    },
    record::ParticipantRecord,
};
use crate::{
    clock::SharedClock,
    directory::{ActorKind, Died, StopCause},
    metrics::ActorMetrics,
    outcome::ParticipantOutcome,
    policy::{
        health::{self, Charge, EjectionContext, EscrowView, HealthEffect, OutcomeFacts},
        perf::{self, PerfSample},
        settings::HealthSettings,
    },
    protocol::crypto::Address,
    stats::{
        timers::{self, Timer},
        tracked_actor, ActorRegistry, Kind, StatsSlot, TrackedRecipient,
    },
    store::{ns, Ack, SharedStore},
};

/// Everything a participant actor is given.
#[derive(Clone)]
pub struct ParticipantDeps {
    pub store: SharedStore,
    pub clock: SharedClock,
    pub log: Logger,
    pub settings: Arc<HealthSettings>,
    pub metrics: ActorMetrics,
    pub fault_injection: bool,
    /// Where health changes go (the directory forwards them to escrows).
    pub changes: TrackedRecipient<HealthChanged>,
    pub on_stop: TrackedRecipient<Died>,
    /// Where its own ejections and probations go once persisted (shared with other replicas).
    pub decisions: DecisionSink,
    /// Where this actor registers its stats.
    pub actors: ActorRegistry,
}

/// The participant actor (see the module docs).
pub struct ParticipantActor {
    pub(super) address: Address,
    pub(super) record: ParticipantRecord,
    pub(super) deps: ParticipantDeps,
    pub(super) log: Logger,
    views: BTreeMap<String, (EscrowView, bool)>,
    handled: u64,
    tick: Option<Timer>,
    stats: StatsSlot,
}

/// The participant's persisted record (a fresh one when absent or unreadable).
pub(super) fn stored_record(
    address: &Address,
    store: &SharedStore,
    log: &Logger,
) -> ParticipantRecord {
    match store.get(ns::PARTICIPANTS, address.as_str()) {
        Ok(Some(v)) => serde_json::from_value(v).unwrap_or_else(|e| {
            warn!(log, "participant record unreadable; starting fresh"; "error" => %e);
            ParticipantRecord::new(address.clone())
        }),
        Ok(None) => ParticipantRecord::new(address.clone()),
        Err(e) => {
            warn!(log, "participant record not loaded"; "error" => %e);
            ParticipantRecord::new(address.clone())
        }
    }
}

impl ParticipantActor {
    /// Loads the participant's record from the store (or starts a fresh one).
    pub fn load(address: Address, deps: ParticipantDeps) -> ParticipantActor {
        let log = deps.log.new(o!("participant" => address.to_string()));
        let record = stored_record(&address, &deps.store, &log);
        let stats = deps
            .actors
            .register(Kind::Participant, address.to_string(), &deps.clock);
        ParticipantActor {
            address,
            record,
            deps,
            log,
            views: BTreeMap::new(),
            handled: 0,
            tick: None,
            stats,
        }
    }

    pub(super) fn now(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    pub(super) fn persist(&self) -> Ack {
        let value = serde_json::to_value(&self.record).unwrap_or_default();
        self.deps
            .store
            .put(ns::PARTICIPANTS, self.address.as_str(), value)
    }

    /// Persists the record; once durable, hands `decision` (if any) to the decision sink.
    fn persist_in_background(&self, decision: Option<HealthDecision>) {
        let ack = self.persist();
        let log = self.log.clone();
        let shared = decision
            .zip(self.deps.decisions.clone())
            .map(|(decision, sink)| {
                let address = self.address.clone();
                (sink, HealthDecided { address, decision })
            });
        actix::spawn(async move {
            match ack.await {
                Err(e) => {
                    warn!(log, "participant record not persisted"; "stage" => "store_error", "error" => %e)
                }
                Ok(()) => {
                    if let Some((sink, decided)) = shared {
                        let _ = sink.send(decided);
                    }
                }
            }
        });
    }

    /// Commits a new health state: logs and counts its effects, tells the escrows, re-arms the
    /// tick.
    pub(super) fn commit(
        &mut self,
        next: health::HealthState,
        effects: Vec<HealthEffect>,
        ctx: &mut Context<Self>,
    ) {
        let before = self.record.health.state.label();
        self.record.health = next;
        let after = self.record.health.state.label();
        if before != after {
            self.deps
                .metrics
                .participants
                .with_label_values(&[before])
                .dec();
            self.deps
                .metrics
                .participants
                .with_label_values(&[after])
                .inc();
        }
        let now = self.now();
        for effect in effects {
            match effect {
                HealthEffect::Ejected { .. } => {
                    self.record.ejected_at_ms.get_or_insert(now);
                }
                HealthEffect::BecameHealthy => {
                    if let Some(at) = self.record.ejected_at_ms.take() {
                        let secs = now.saturating_sub(at) as f64 / 1000.0;
                        self.deps.metrics.recovery_seconds.observe(secs);
                        info!(self.log, "recovered"; "stage" => "participant_recovered",
                            "after_ms" => now.saturating_sub(at));
                    }
                }
                _ => {}
            }
            self.log_effect(effect);
        }
        self.publish();
        self.arm_tick(ctx);
    }

    fn log_effect(&self, effect: HealthEffect) {
        let strikes = health::decayed_strikes(&self.record.health, &self.deps.settings, self.now());
        match effect {
            HealthEffect::Ejected { until_ms, level } => {
                self.deps.metrics.ejections.inc();
                info!(self.log, "participant ejected"; "stage" => "participant_ejected",
                    "until_ms" => until_ms, "level" => level, "strikes" => strikes);
            }
            HealthEffect::ProbationStarted => info!(self.log, "probation started";
                "stage" => "participant_probation_started"),
            HealthEffect::BecameHealthy => info!(self.log, "participant healthy";
                "stage" => "participant_healthy"),
            HealthEffect::BecameSuspect => info!(self.log, "participant suspect";
                "stage" => "participant_suspect", "strikes" => strikes),
            HealthEffect::EjectionSuppressed { reason } => {
                let reason = format!("{reason:?}").to_lowercase();
                self.deps
                    .metrics
                    .ejections_suppressed
                    .with_label_values(&[&reason])
                    .inc();
                info!(self.log, "ejection suppressed"; "stage" => "participant_ejection_suppressed",
                    "reason" => reason)
            }
            HealthEffect::LevelLowered { level } => info!(self.log, "ejection level lowered";
                "stage" => "participant_level_lowered", "level" => level),
        }
    }

    fn publish(&self) {
        let now = self.now();
        self.deps.changes.do_send(HealthChanged {
            address: self.address.clone(),
            health: self.record.health.clone(),
            perf: self.record.perf.clone(),
            routable: health::is_routable(&self.record.health, now),
            preference: health::preference(&self.record.health),
        });
    }

    pub(super) fn arm_tick(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.tick.take() {
            t.cancel(&self.stats, ctx);
        }
        let Some(at) = health::next_deadline(&self.record.health, &self.deps.settings) else {
            return;
        };
        let delay =
            Duration::from_millis(u64::try_from(at.saturating_sub(self.now())).unwrap_or(0));
        let timer = timers::run_later(&self.stats, ctx, "health_tick", delay, Self::tick_due);
        self.tick = Some(timer);
    }

    /// The health tick fired: apply the deadline that came due, or re-arm.
    fn tick_due(&mut self, ctx: &mut Context<Self>) {
        self.tick = None;
        let (next, effects) = health::tick(&self.record.health, &self.deps.settings, self.now());
        if next != self.record.health {
            let decision = HealthDecision::of(&effects);
            self.commit(next, effects, ctx);
            self.persist_in_background(decision);
        } else {
            self.arm_tick(ctx);
        }
    }

    fn context(&self) -> EjectionContext {
        EjectionContext {
            escrows: self.views.values().map(|(v, _)| *v).collect(),
            gateway_has_any_success: self.views.values().any(|(_, s)| *s),
        }
    }

    pub(super) fn view(&self) -> Arc<ParticipantView> {
        let now = self.now();
        let s = &self.deps.settings;
        Arc::new(ParticipantView {
            address: self.address.clone(),
            record: self.record.clone(),
            handled: self.handled,
            state: self.record.health.state.label(),
            strikes: health::decayed_strikes(&self.record.health, s, now),
            routable: health::is_routable(&self.record.health, now),
            unresponsive: perf::is_unresponsive(&self.record.perf, s, now),
            next_tick_ms: health::next_deadline(&self.record.health, s),
        })
    }

    /// Applies an admin change, persists it, and answers only once it is durable.
    pub(super) fn admin_change(
        &mut self,
        next: health::HealthState,
        effects: Vec<HealthEffect>,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<Arc<ParticipantView>, String>> {
        self.commit(next, effects, ctx);
        let ack = self.persist();
        Box::pin(ack.into_actor(self).map(|res, act, _| {
            res.map_err(|e| e.to_string())?;
            Ok(act.view())
        }))
    }
}

impl Actor for ParticipantActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
        self.deps
            .metrics
            .participants
            .with_label_values(&[self.record.health.state.label()])
            .inc();
        self.publish();
        self.arm_tick(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.deps
            .metrics
            .participants
            .with_label_values(&[self.record.health.state.label()])
            .dec();
        self.deps.on_stop.do_send(Died {
            kind: ActorKind::Participant,
            id: self.address.to_string(),
            cause: StopCause::Failed,
        });
    }
}

tracked_actor!(ParticipantActor);

impl Handler<ParticipantOutcome> for ParticipantActor {
    type Result = ();

    fn handle(&mut self, msg: ParticipantOutcome, ctx: &mut Self::Context) {
        self.handled += 1;
        let now = self.now();
        let o = &msg.outcome;
        self.views.insert(
            o.escrow_id.clone(),
            (msg.escrow_view, msg.escrow_has_success),
        );
        self.record.count(o, now);
        if !msg.shared {
            if let Some(sample) = PerfSample::from_outcome(o) {
                self.record.perf = perf::record(&self.record.perf, &sample, &self.deps.settings);
            }
        }
        let mut facts = OutcomeFacts::from_outcome(o, msg.winner);
        facts.shared = msg.shared;
        if matches!(facts.charge(), Charge::Strike | Charge::EjectNow) {
            self.record.note_strike(o, now);
            self.deps
                .metrics
                .strikes
                .with_label_values(&[o.reason.as_str()])
                .inc();
            info!(self.log, "struck"; "stage" => "participant_struck", "reason" => o.reason,
                "escrow" => &o.escrow_id, "nonce" => o.nonce);
        }
        let draw = rand::random::<f64>() * 2.0 - 1.0;
        let (next, effects) = health::on_outcome(
            &self.record.health,
            &facts,
            &self.context(),
            &self.deps.settings,
            now,
            draw,
        );
        let decision = HealthDecision::of(&effects);
        self.commit(next, effects, ctx);
        self.persist_in_background(decision);
    }
}

impl Handler<GetParticipant> for ParticipantActor {
    type Result = MessageResult<GetParticipant>;

    fn handle(&mut self, _: GetParticipant, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.view())
    }
}
