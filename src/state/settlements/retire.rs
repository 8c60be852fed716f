//! Retiring an escrow another replica runs, and settlements that change owner (several replicas
//! on PostgreSQL; README "Creating and rotating escrows").
//!
//! Only the escrow's lease holder drives its settlement (every record write is fenced by that
//! lease), so the rotation's leader cannot settle an escrow another replica runs. It writes a
//! **retire request** instead: a record in [`NS_RETIRE`] (key = escrow id), fenced by the
//! rotation's duty lease (a deposed leader writes none). Every replica's settlement tick (250 ms)
//! reads the requests and starts the settlement of each escrow whose lease it holds, exactly as
//! a local retirement (`Settlements::start`: drain, then settle); once that start is durable
//! (the settlement record written) the request is deleted. The request is idempotent (a running
//! settlement is joined; a settled or unregistered escrow drops it) and durable: a
//! restarted owner, or a new one after a handoff or a failover, picks it up.
//!
//! A settlement that changes owner half-way (its escrow handed off or taken over) is resumed by
//! the new owner's tick from its durable record ([`Settlements::take_over`]), at most every
//! [`RESUME_EVERY`] per escrow.
//!
//! Metric `devshard_escrow_retirements_total{step}` ([`Step`]); log stages
//! `escrow_retire_requested`, `escrow_retire_executed`, `escrow_retire_dropped`,
//! `settlement_taken_over`.

use std::time::{Duration, Instant};

use devshard_actors::{
    settlement::{load_record, SettlementRecord, SettlementState},
    store::{ns, StoreError},
};
use prometheus::{IntCounterVec, Opts, Registry};
use serde::{Deserialize, Serialize};
use slog::{info, warn};

use super::{SettleError, Settlements};

/// Record namespace of retire requests (key = escrow id).
pub const NS_RETIRE: &str = "escrow_retire";
/// How often a settlement that changed owner may be resumed here (per escrow).
pub const RESUME_EVERY: Duration = Duration::from_secs(5);

/// A durable request to retire (drain and settle) an escrow, for its lease owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetireRequest {
    pub escrow_id: String,
    pub model: String,
    /// The replica that leads the rotation and asked.
    pub requested_by: String,
    pub requested_at_ms: i64,
}

/// The `step` label of `devshard_escrow_retirements_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The leader wrote a request for an escrow another replica runs.
    Requested,
    /// The owner started the settlement of a requested escrow.
    Executed,
    /// A request was dropped without a start (escrow gone, settling already, not ours, failed).
    Dropped,
    /// An unsettled settlement whose escrow changed owner resumed here.
    TakenOver,
}

impl Step {
    pub const ALL: [Step; 4] = [
        Step::Requested,
        Step::Executed,
        Step::Dropped,
        Step::TakenOver,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Step::Requested => "requested",
            Step::Executed => "executed",
            Step::Dropped => "dropped",
            Step::TakenOver => "taken_over",
        }
    }
}

/// Registers `devshard_escrow_retirements_total{step}`.
pub fn register(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    let m = IntCounterVec::new(
        Opts::new(
            "escrow_retirements_total",
            "Retirements of escrows run by another replica, and settlements taken over, by step",
        ),
        &["step"],
    )?;
    registry.register(Box::new(m.clone()))?;
    for s in Step::ALL {
        m.with_label_values(&[s.label()]);
    }
    Ok(m)
}

/// What a replica does with a retire request (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pickup {
    /// Start the settlement here (this replica holds the escrow's lease).
    Start,
    /// Another replica runs the escrow: its tick picks the request up.
    Leave,
    /// Nothing left to do: the escrow is gone or settled.
    Drop(&'static str),
}

/// The pickup decision for a request of an escrow (`registered`, its lease held here or not,
/// its settlement settled already or not). A settlement under way is started again by the
/// holder (`start` joins it and makes sure it broadcasts), so the request is only deleted
/// after its lease holder took it.
pub fn pickup(registered: bool, held_here: bool, settled: bool) -> Pickup {
    if !registered {
        return Pickup::Drop("escrow not registered");
    }
    if settled {
        return Pickup::Drop("escrow settled");
    }
    if held_here {
        Pickup::Start
    } else {
        Pickup::Leave
    }
}

/// What retiring an escrow did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retired {
    /// Its settlement started here.
    Started,
    /// Another replica runs it: a request was written for it.
    Requested,
    /// A request was already waiting.
    AlreadyRequested,
}

/// Why an escrow could not be retired.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetireError {
    #[error(transparent)]
    Settle(#[from] SettleError),
    #[error("the retire request was not persisted: {0}")]
    Store(#[from] StoreError),
}

impl Settlements {
    fn count(&self, step: Step) {
        if let Some(m) = &self.retirements {
            m.with_label_values(&[step.label()]).inc();
        }
    }

    /// Retires `escrow_id` for the rotation: here when this replica holds its lease (every
    /// escrow on SQLite), else by a request fenced by the rotation's duty lease `duty`.
    pub async fn retire(
        &self,
        escrow_id: &str,
        model: &str,
        duty: &str,
    ) -> Result<Retired, RetireError> {
        let store = &self.deps.store;
        let Some(me) = store.replica().filter(|_| !store.holds_lease(escrow_id)) else {
            self.start(escrow_id, true).await?;
            return Ok(Retired::Started);
        };
        if store.get(NS_RETIRE, escrow_id)?.is_some() {
            return Ok(Retired::AlreadyRequested);
        }
        let request = RetireRequest {
            escrow_id: escrow_id.to_owned(),
            model: model.to_owned(),
            requested_by: me.id,
            requested_at_ms: self.deps.clock.now_ms(),
        };
        let value = serde_json::to_value(&request).unwrap_or_default();
        store.put_fenced(duty, NS_RETIRE, escrow_id, value).await?;
        self.count(Step::Requested);
        info!(self.deps.log, "retire request written for the escrow's owner";
            "stage" => "escrow_retire_requested", "escrow" => escrow_id, "model" => model);
        Ok(Retired::Requested)
    }

    /// Starts the settlement of every requested escrow whose lease this replica holds, and
    /// deletes the requests that are done (shared stores only; called by the tick).
    pub(super) async fn pick_up_retirements(&self) {
        let store = self.deps.store.clone();
        if store.replica().is_none() {
            return;
        }
        let Ok(requests) = store.list(NS_RETIRE) else {
            return;
        };
        for (id, value) in requests {
            let registered = store.get(ns::ESCROWS, &id).ok().flatten().is_some();
            let settled = load_record(&store, &id)
                .is_some_and(|r| matches!(r.state, SettlementState::Settled { .. }));
            let requested_by = serde_json::from_value::<RetireRequest>(value)
                .map(|r| r.requested_by)
                .unwrap_or_default();
            let outcome = match pickup(registered, store.holds_lease(&id), settled) {
                Pickup::Leave => continue,
                Pickup::Drop(why) => Err(why.to_owned()),
                Pickup::Start => match self.start(&id, true).await {
                    Ok(_) => Ok(()),
                    // The lease moved since: the new owner picks the request up.
                    Err(SettleError::NotOwner(_)) => continue,
                    Err(e) => Err(e.to_string()),
                },
            };
            match &outcome {
                Ok(()) => {
                    self.count(Step::Executed);
                    info!(self.deps.log, "retire request executed: the escrow settles here";
                        "stage" => "escrow_retire_executed", "escrow" => &id,
                        "requested_by" => &requested_by);
                }
                Err(why) => {
                    self.count(Step::Dropped);
                    info!(self.deps.log, "retire request dropped";
                        "stage" => "escrow_retire_dropped", "escrow" => &id, "why" => why);
                }
            }
            if let Err(e) = store.delete(NS_RETIRE, &id).await {
                warn!(self.deps.log, "retire request not deleted; retried at the next tick";
                    "stage" => "escrow_retire_dropped", "escrow" => &id, "error" => %e);
            }
        }
    }

    /// Resumes the unsettled settlement of an escrow whose lease this replica holds when no
    /// settlement actor runs it here (its escrow changed owner half-way), at most every
    /// [`RESUME_EVERY`] (shared stores only; called by the tick).
    pub(super) fn take_over(&self, escrow_id: &str, record: &SettlementRecord) {
        let store = &self.deps.store;
        if store.replica().is_none()
            || matches!(record.state, SettlementState::Settled { .. })
            || !store.holds_lease(escrow_id)
        {
            return;
        }
        let running = self
            .actors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(escrow_id)
            .is_some_and(|a| a.connected());
        if running {
            return;
        }
        {
            let mut resumed = self.resumed.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if resumed
                .get(escrow_id)
                .is_some_and(|at| now.duration_since(*at) < RESUME_EVERY)
            {
                return;
            }
            resumed.insert(escrow_id.to_owned(), now);
        }
        match self.actor(escrow_id) {
            Ok(_) => {
                self.count(Step::TakenOver);
                info!(self.deps.log, "settlement resumed here after its escrow changed owner";
                    "stage" => "settlement_taken_over", "escrow" => escrow_id,
                    "state" => record.state.label());
            }
            Err(e) => warn!(self.deps.log, "settlement not taken over";
                "stage" => "settlement_taken_over", "escrow" => escrow_id, "error" => %e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_holder_starts_a_request_and_everyone_else_leaves_it() {
        assert_eq!(pickup(true, true, false), Pickup::Start);
        assert_eq!(pickup(true, false, false), Pickup::Leave);
        assert!(matches!(pickup(true, true, true), Pickup::Drop(_)));
        assert!(matches!(pickup(true, false, true), Pickup::Drop(_)));
        assert!(matches!(pickup(false, true, false), Pickup::Drop(_)));
        assert_eq!(Step::ALL.len(), 4);
    }
}
