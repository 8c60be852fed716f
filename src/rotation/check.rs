//! One rotation check of one model (docs/lifecycle.md §4): decide from the facts, create a
//! replacement and retire the running-low escrows as decided (here, or by a retire request to
//! the escrow's owner: `crate::state::settlements::Settlements::retire`), remove the settled
//! escrows whose retention is over ([`super::retention`], `crate::escrow_removal`), and the
//! view it leaves for `GET /v1/admin/rotation` and the debug listing.

use std::collections::BTreeMap;

use serde::Serialize;
use slog::{info, warn};

use super::{
    intent::{CreateIntent, Origin},
    plan::{decide, nonce_margin, retry_at, role, Create, Delays, EscrowFacts, Role},
    remote::BudgetSource,
    retention,
    runway::Runway,
    settings::ModelRotation,
    Rotation,
};
use crate::{
    escrow_removal::{Removal, Remover},
    state::settlements::{Retired, Settlements},
};

/// One escrow in the view.
#[derive(Debug, Clone, Serialize)]
pub struct EscrowRole {
    pub escrow_id: String,
    pub role: Role,
    pub nonce: u64,
    pub nonces_left: u64,
    /// What it can still spend (balance less reservations).
    pub spendable: u64,
    /// Where `nonce` and `spendable` came from (live here, published by another replica, …).
    pub budget: BudgetSource,
    /// Nonces it used per second lately, and the nonces left at which it runs low
    /// (`plan::nonce_margin`).
    pub burn_per_s: u64,
    pub low_at: u64,
    /// When a settled escrow will be removed (`rotation.settled_retention_s` after it settled;
    /// `None`: not settled, or settled escrows are kept).
    pub removal_at_ms: Option<i64>,
}

/// One model in the view.
#[derive(Debug, Clone, Serialize)]
pub struct ModelView {
    pub model: String,
    pub target_count: u32,
    pub amount: u64,
    pub max_deposit_per_day: u64,
    pub deposited_today: u64,
    pub pending_creations: u32,
    pub decision: Option<Create>,
    /// Nonces the serving (active and low) escrows have left, and what the model uses in
    /// `margin_s` at its recent rate (`super::runway`).
    pub runway_nonces: u64,
    pub runway_need: u64,
    /// Seconds the serving escrows last at the model's recent rate (`None`: no rate measured).
    pub runway_s: Option<u64>,
    /// Escrows serving (active and low); up to `target_count + max_spares`.
    pub serving: u32,
    pub max_spares: u32,
    pub failures: u32,
    pub backoff_until_ms: i64,
    pub last_error: Option<String>,
    pub rotations: u64,
    /// Settled escrows of the model the retention removed (since this replica started).
    pub removed_settled: u64,
    pub escrows: Vec<EscrowRole>,
}

impl ModelView {
    /// Nothing of the model can serve (no serving escrow with nonces and balance left).
    pub fn dry(&self) -> bool {
        self.runway_nonces == 0
    }
}

/// What `GET /v1/admin/rotation` and the debug listing show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RotationView {
    pub enabled: bool,
    /// This replica runs the rotation (always on SQLite; on PostgreSQL the replica holding the
    /// `__rotation` duty lease).
    pub leading: bool,
    /// The replica that runs it when it is another one.
    pub leader_elsewhere: Option<String>,
    pub check_interval_ms: u64,
    /// How long a settled escrow stays registered (0: forever).
    pub settled_retention_s: u64,
    pub last_check_ms: Option<i64>,
    pub checks: u64,
    pub models: Vec<ModelView>,
    pub intents: Vec<CreateIntent>,
    /// Why the last check decided nothing (the shared budgets could not be read).
    pub facts_error: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Backoff {
    pub failures: u32,
    /// When the last creation failed (the back-off counts from there: `plan::retry_at`).
    pub failed_at_ms: i64,
    pub last_error: Option<String>,
    pub rotations: u64,
    pub removed_settled: u64,
}

/// What one check did for one model.
pub(super) struct Checked {
    pub view: ModelView,
    /// `Some(Ok)`: a creation was broadcast; `Some(Err)`: it failed.
    pub created: Option<Result<(), String>>,
    /// Settled escrows this check removed.
    pub removed: u64,
}

/// The retention of settled escrows in force for a check.
#[derive(Clone, Copy)]
pub(super) struct Retention<'a> {
    pub remover: &'a Remover,
    /// `rotation.settled_retention_s` (0: kept).
    pub retention_s: u64,
}

/// One model's check: decide, then create and retire as decided.
pub(super) async fn check_model(
    rotation: &Rotation,
    settlements: &Settlements,
    rule: &ModelRotation,
    facts: &BTreeMap<String, Vec<EscrowFacts>>,
    (b, delays): (&Backoff, Delays),
    keep: Retention<'_>,
) -> Checked {
    let creator = &rotation.creator;
    let now = creator.clock.now_ms();
    let escrows = facts.get(&rule.model).cloned().unwrap_or_default();
    let roles: Vec<Role> = escrows.iter().map(|e| role(e, rule)).collect();
    let runway = Runway::of(&escrows, &roles, rule);
    let pending = creator
        .intents()
        .iter()
        .filter(|i| i.model == rule.model)
        .count() as u32;
    let deposited = creator.deposits.today(&rule.model);
    let dry = runway.left == 0;
    let until_ms = retry_at(b.failures, b.failed_at_ms, dry, delays);
    let d = decide(rule, &runway, pending, deposited, now, until_ms);
    let log = &creator.log;
    let mut created = None;
    if let Create::Now { why } = d.create {
        let low: Vec<&str> = runway
            .serving
            .iter()
            .filter(|s| s.role == Role::Low)
            .map(|s| s.escrow_id.as_str())
            .collect();
        info!(log, "replacement escrow being created"; "stage" => "escrow_rotation_started",
            "model" => &rule.model, "amount" => rule.amount, "running_low" => low.join(","),
            "why" => why.label(), "serving" => runway.serving.len(),
            "runway_nonces" => runway.left, "runway_need" => runway.need,
            "deposited_today" => deposited, "cap" => rule.max_deposit_per_day);
        let r = creator
            .create(&rule.model, rule.amount, Origin::Rotation)
            .await;
        created = Some(match r {
            Ok(intent) => {
                if let Some(m) = &creator.metrics {
                    m.rotations
                        .with_label_values(&[&rule.model, why.label()])
                        .inc();
                }
                creator.reconcile(&intent.tx_hash).await;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        });
    }
    for id in &d.retire {
        match settlements
            .retire(id, &rule.model, creator.duty.name())
            .await
        {
            Ok(Retired::AlreadyRequested) => {}
            Ok(how) => info!(log, "running-low escrow retires; its replacement serves";
                "stage" => "escrow_retiring", "escrow" => id, "model" => &rule.model,
                "how" => ?how),
            Err(e) => warn!(log, "retiring escrow not settled"; "stage" => "escrow_retiring",
                "escrow" => id, "error" => %e),
        }
    }
    let removed = remove_settled(keep, &escrows, now, rotation).await;
    let view = ModelView {
        model: rule.model.clone(),
        target_count: rule.target_count,
        amount: rule.amount,
        max_deposit_per_day: rule.max_deposit_per_day,
        deposited_today: creator.deposits.today(&rule.model),
        pending_creations: pending,
        decision: Some(d.create),
        runway_nonces: runway.left,
        runway_need: runway.need,
        runway_s: runway.seconds(),
        serving: u32::try_from(runway.serving.len()).unwrap_or(u32::MAX),
        max_spares: rule.max_spares,
        failures: 0,
        backoff_until_ms: until_ms,
        last_error: None,
        rotations: 0,
        removed_settled: 0,
        escrows: escrows
            .iter()
            .zip(&roles)
            .filter(|(e, _)| !removed.contains(&e.escrow_id))
            .map(|(e, r)| EscrowRole {
                escrow_id: e.escrow_id.clone(),
                role: if d.retire.contains(&e.escrow_id) {
                    Role::Retiring
                } else {
                    *r
                },
                nonce: e.nonce,
                nonces_left: e.serving_limit.saturating_sub(e.nonce),
                spendable: e.spendable,
                budget: e.source.clone(),
                burn_per_s: e.burn_per_s,
                low_at: nonce_margin(e, rule),
                removal_at_ms: retention::removal_at_ms(e, keep.retention_s),
            })
            .collect(),
    };
    Checked {
        view,
        created,
        removed: removed.len() as u64,
    }
}

/// Removes the settled escrows among `escrows` whose retention is over; the ids removed.
async fn remove_settled(
    keep: Retention<'_>,
    escrows: &[EscrowFacts],
    now_ms: i64,
    rotation: &Rotation,
) -> Vec<String> {
    let mut removed = Vec::new();
    for id in retention::due(escrows, keep.retention_s, now_ms) {
        // Logged and counted by the removal (stage `escrow_removed`, `by = retention`).
        match keep.remover.remove(&id, Removal::retention()).await {
            Ok(_) => removed.push(id),
            Err(e) => warn!(rotation.creator.log, "settled escrow not removed; next check retries";
                "stage" => "escrow_retention_failed", "escrow" => &id, "error" => %e),
        }
    }
    removed
}
