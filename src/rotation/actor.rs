//! `RotationActor`: keeps `target_count` escrows active per model (docs/lifecycle.md §4).
//!
//! - **Owns**: each model's creation back-off (failures in a row, the time of the next try, the
//!   last error), each escrow's nonce burn rate ([`super::burn`]) and the last check's view
//!   (roles, budgets, decisions) for the debug listing.
//! - **Survives a restart**: nothing of its own in memory matters. Open creation intents, the
//!   day's deposits and the creations record are in the store ([`super::creator`],
//!   [`super::deposits`]); escrow budgets come from the escrow board (live), the owners'
//!   publications on a shared store or the settlement tick ([`super::facts`]), roles from the
//!   settlement records; retire requests for escrows other replicas run are records too
//!   (`crate::state::settlements::NS_RETIRE`). The back-off starts again from zero after a
//!   restart (bounded: the daily cap still holds), the burn rates are measured again from the
//!   first check on (until the second, `nonce_margin` alone decides), and so does the time this
//!   replica has led
//!   (which decides when a stale publication makes a budget unknown: [`super::remote`]).
//! - **One replica**: a check runs only on the replica that leads the rotation's duty lease
//!   (`crate::store::duty`, PostgreSQL with several replicas); the others try to take it over
//!   every 2 s and do nothing else. The creator's writes are fenced by that lease.
//! - **Timers**: one — a 100 ms tick that starts the check once `rotation.check_interval_ms`
//!   (as in force at that tick) has passed since the last one, or 2 s (the confirmation poll)
//!   while a creation intent is open or a model has nothing to serve from; the first runs at
//!   start, and a settings change runs one at once. Each check first reconciles every open
//!   intent (also when rotation is off: admin creations need it), then, per rotating model,
//!   creates a replacement when too few escrows are active (before any runs dry: see
//!   [`super::plan::role`]) or a spare when the serving ones last less than `margin_s`
//!   ([`super::runway`]), and retires the running-low ones once their replacements serve and
//!   the others cover the margin without them (drain + settle by the settlement actors: here,
//!   or by the escrow's owner through a retire request).

use std::{cell::RefCell, collections::BTreeMap, rc::Rc, time::Duration};

use actix::prelude::*;
use devshard_actors::{directory::EscrowBoard, settlement::machine::CONFIRM_POLL_MS};
use slog::warn;

pub use super::check::{EscrowRole, ModelView, RotationView};
use super::{
    burn::BurnRates,
    check::{check_model, Backoff, Checked, Retention},
    facts::{self, Sources},
    plan::{retry_at, Delays},
    remote::Freshness,
    settings::RotationSettings,
    Rotation,
};
use crate::{
    escrow_removal::Remover,
    replicas::Replicas,
    state::{settlements::Settlements, Deactivated},
    store::duty::Leadership,
};

/// How often the actor looks whether a check is due (the smallest `check_interval_ms`).
const TICK: Duration = Duration::from_millis(100);

pub struct RotationActor {
    rotation: Rotation,
    settlements: Settlements,
    deactivated: Deactivated,
    max_tokens_cap: u64,
    board: EscrowBoard,
    /// Removes settled escrows once their retention is over (`super::retention`).
    remover: Remover,
    /// The other replicas (PostgreSQL): the budgets they publish.
    replicas: Option<Replicas>,
    /// Since when this replica leads the rotation (its clock).
    leading_since_ms: Option<i64>,
    backoff: BTreeMap<String, Backoff>,
    /// Shared with the running check (same thread), which observes the nonces it reads.
    burn: Rc<RefCell<BurnRates>>,
    view: RotationView,
    busy: bool,
    /// When the last check started.
    started_ms: Option<i64>,
}

/// The last check's view.
#[derive(Message)]
#[rtype(result = "RotationView")]
pub struct GetRotation;

/// Run a check now (settings changed).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Kick;

/// What one check found.
struct Outcome {
    settings: RotationSettings,
    models: Vec<Checked>,
    facts_error: Option<String>,
}

impl RotationActor {
    pub fn new(
        rotation: Rotation,
        settlements: Settlements,
        deactivated: Deactivated,
        max_tokens_cap: u64,
        (board, replicas): (EscrowBoard, Option<Replicas>),
        remover: Remover,
    ) -> Self {
        RotationActor {
            rotation,
            settlements,
            deactivated,
            max_tokens_cap,
            board,
            remover,
            replicas,
            leading_since_ms: None,
            backoff: BTreeMap::new(),
            burn: Rc::default(),
            view: RotationView::default(),
            busy: false,
            started_ms: None,
        }
    }

    /// Runs a check when `check_interval_ms` (as in force now) has passed since the last one,
    /// or the confirmation poll interval while a creation is open.
    fn due(&mut self, ctx: &mut Context<Self>) {
        let mut every =
            i64::try_from(self.rotation.settings().check_interval_ms).unwrap_or(i64::MAX);
        let dry = self.view.models.iter().any(ModelView::dry);
        if !self.view.intents.is_empty() || !self.view.leading || dry {
            // Open intents are polled; a replica that does not lead tries to take over as often;
            // a model with nothing to serve from gets its creation tried again as often (within
            // its back-off, `plan::retry_at`).
            every = every.min(CONFIRM_POLL_MS);
        }
        let now = self.rotation.creator.clock.now_ms();
        if self.started_ms.is_none_or(|at| now - at >= every) {
            self.check(ctx);
        }
    }

    fn check(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        self.started_ms = Some(self.rotation.creator.clock.now_ms());
        // One replica rotates (it pays the deposits): the holder of the rotation's duty lease.
        match self.rotation.creator.duty.lead() {
            Leadership::Leading => {
                self.view.leading = true;
                self.view.leader_elsewhere = None;
                if self.leading_since_ms.is_none() {
                    self.leading_since_ms = self.started_ms;
                }
            }
            other => {
                self.view.leading = false;
                self.leading_since_ms = None;
                // The budget sources, runways and serving counts are the leader's figures.
                if let Some(m) = &self.rotation.creator.metrics {
                    m.count_sources(std::iter::empty());
                    m.runway_seconds.reset();
                    m.serving.reset();
                }
                self.view.leader_elsewhere = match other {
                    Leadership::Elsewhere { owner } => Some(owner),
                    _ => None,
                };
                return;
            }
        }
        self.busy = true;
        let settings = self.rotation.settings();
        let rotation = self.rotation.clone();
        let settlements = self.settlements.clone();
        let deactivated = self.deactivated.clone();
        let backoff = self.backoff.clone();
        let cap = self.max_tokens_cap;
        let board = self.board.clone();
        let replicas = self.replicas.clone();
        let freshness = self.freshness();
        let burn = self.burn.clone();
        let remover = self.remover.clone();
        let fut = async move {
            rotation.creator.reconcile_all().await;
            let mut out = Outcome {
                settings,
                models: Vec::new(),
                facts_error: None,
            };
            if !out.settings.enabled {
                return out;
            }
            let sources = Sources {
                board: &board,
                shared: replicas.as_ref().and_then(Replicas::pg).zip(freshness),
            };
            let mut facts = match facts::gather(&settlements, &deactivated, cap, sources).await {
                Ok(facts) => facts,
                Err(e) => {
                    warn!(rotation.creator.log, "rotation check skipped: the shared budgets cannot be read";
                            "stage" => "rotation_facts_unavailable", "error" => %e);
                    out.facts_error = Some(e.to_string());
                    return out;
                }
            };
            let now = rotation.creator.clock.now_ms();
            burn.borrow_mut().apply(facts.values_mut().flatten(), now);
            let keep = Retention {
                remover: &remover,
                retention_s: out.settings.settled_retention_s,
            };
            for rule in &out.settings.models {
                let b = backoff.get(&rule.model).cloned().unwrap_or_default();
                let delays = Delays {
                    first_ms: out.settings.backoff_first_ms,
                    max_ms: out.settings.backoff_max_ms,
                };
                out.models.push(
                    check_model(&rotation, &settlements, rule, &facts, (&b, delays), keep).await,
                );
            }
            out
        };
        ctx.spawn(fut.into_actor(self).map(|out, act, _| {
            act.busy = false;
            act.apply(out);
        }));
    }

    /// How old a published budget may be (3 lease TTLs), and how long this replica has led
    /// (`None` on a store one process owns).
    fn freshness(&self) -> Option<Freshness> {
        let ttl = self.rotation.creator.store.replica()?.lease_ttl;
        let stale_after_ms = i64::try_from(ttl.as_millis().saturating_mul(3)).unwrap_or(i64::MAX);
        let now = self.rotation.creator.clock.now_ms();
        Some(Freshness {
            stale_after_ms,
            leading_for_ms: self.leading_since_ms.map_or(0, |at| now - at),
        })
    }

    fn apply(&mut self, outcome: Outcome) {
        let Outcome {
            settings,
            models: out,
            facts_error,
        } = outcome;
        let now = self.rotation.creator.clock.now_ms();
        let log = self.rotation.creator.log.clone();
        let metrics = self.rotation.creator.metrics.clone();
        let mut models = Vec::new();
        for mut c in out {
            let b = self.backoff.entry(c.view.model.clone()).or_default();
            match c.created {
                Some(Ok(())) => {
                    b.failures = 0;
                    c.view.backoff_until_ms = 0;
                    b.last_error = None;
                    b.rotations += 1;
                }
                Some(Err(e)) => {
                    b.failures += 1;
                    b.failed_at_ms = now;
                    let dry = c.view.dry();
                    let delays = Delays {
                        first_ms: settings.backoff_first_ms,
                        max_ms: settings.backoff_max_ms,
                    };
                    c.view.backoff_until_ms = retry_at(b.failures, now, dry, delays);
                    let wait = c.view.backoff_until_ms.saturating_sub(now);
                    warn!(log, "replacement escrow not created; backing off";
                        "stage" => "escrow_rotation_started", "model" => &c.view.model,
                        "failures" => b.failures, "retry_in_ms" => wait, "dry" => dry,
                        "error" => &e);
                    b.last_error = Some(e);
                }
                None => {}
            }
            b.removed_settled += c.removed;
            if let Some(m) = &metrics {
                let model = [c.view.model.as_str()];
                m.backing_off
                    .with_label_values(&model)
                    .set(i64::from(c.view.backoff_until_ms > now));
                let runway = c
                    .view
                    .runway_s
                    .map_or(-1, |s| i64::try_from(s).unwrap_or(i64::MAX));
                m.runway_seconds.with_label_values(&model).set(runway);
                m.serving
                    .with_label_values(&model)
                    .set(i64::from(c.view.serving));
            }
            c.view.failures = b.failures;
            c.view.last_error = b.last_error.clone();
            c.view.rotations = b.rotations;
            c.view.removed_settled = b.removed_settled;
            models.push(c.view);
        }
        let names: Vec<String> = settings.models.iter().map(|m| m.model.clone()).collect();
        self.rotation.creator.deposits.refresh(&names);
        if let Some(m) = &metrics {
            if facts_error.is_none() {
                m.count_sources(models.iter().flat_map(|v| &v.escrows).map(|e| &e.budget));
            }
        }
        if facts_error.is_some() {
            // Nothing was decided: the previous figures stay on view.
            models = std::mem::take(&mut self.view.models);
        }
        self.view = RotationView {
            enabled: settings.active(),
            leading: self.view.leading,
            leader_elsewhere: self.view.leader_elsewhere.clone(),
            check_interval_ms: settings.check_interval_ms,
            settled_retention_s: settings.settled_retention_s,
            last_check_ms: Some(now),
            checks: self.view.checks + 1,
            models,
            intents: self.rotation.creator.intents(),
            facts_error,
        };
    }
}

impl Actor for RotationActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.check(ctx);
        ctx.run_interval(TICK, |act, ctx| act.due(ctx));
    }
}

impl Handler<GetRotation> for RotationActor {
    type Result = MessageResult<GetRotation>;

    fn handle(&mut self, _: GetRotation, _: &mut Self::Context) -> Self::Result {
        let mut v = self.view.clone();
        v.intents = self.rotation.creator.intents();
        MessageResult(v)
    }
}

impl Handler<Kick> for RotationActor {
    type Result = ();

    fn handle(&mut self, _: Kick, ctx: &mut Self::Context) {
        self.check(ctx);
    }
}
