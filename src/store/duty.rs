//! One-replica duties on a shared database: work that must run on exactly one replica at a
//! time, such as escrow rotation (it pays deposits on chain) and the ledger's settlement tail.
//!
//! A duty is a lease row in `escrow_leases` with a reserved id (`__rotation`, `__ledger`),
//! claimed, renewed every TTL/3 and released like an escrow's (`postgres/lease.rs`); the writes
//! that must not happen twice are fenced by its epoch (`Store::put_fenced`). On a store that one
//! process owns (SQLite, memory) every duty is this process's.
//!
//! [`Duty::lead`] is the whole protocol: a replica that holds the lease leads; one that does
//! not tries to claim it (free or expired) and leads if that succeeds. A change of leadership is
//! logged (stage `duty_leadership_changed`) and counted
//! (`devshard_duty_leadership_changes_total{duty,change}`); `devshard_duty_leader{duty}` is 1
//! while this replica leads.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use devshard_actors::store::{SharedStore, StoreError};
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use slog::{info, warn, Logger};

/// The rotation's duty (creating escrows, retiring them, reconciling creation intents).
pub const ROTATION: &str = "__rotation";
/// The ledger's settlement tail (completing cost rows from the escrows' diff logs).
pub const LEDGER_TAIL: &str = "__ledger";
/// Every duty (for the metric's series).
pub const DUTIES: [&str; 2] = [ROTATION, LEDGER_TAIL];

/// Whether a lease id names a duty rather than an escrow (escrow ids are chain ids).
pub fn is_duty(id: &str) -> bool {
    id.starts_with("__")
}

/// The duty metrics (register once per registry; cheap to clone).
#[derive(Debug, Clone)]
pub struct DutyMetrics {
    /// 1 while this replica leads the duty.
    pub leader: IntGaugeVec,
    /// Leadership changes, by `change`: `gained`, `lost`.
    pub changes: IntCounterVec,
}

impl DutyMetrics {
    /// Registers the metrics.
    pub fn register(registry: &Registry) -> Result<DutyMetrics, prometheus::Error> {
        let m = DutyMetrics {
            leader: IntGaugeVec::new(
                Opts::new(
                    "duty_leader",
                    "1 while this replica runs the one-replica duty",
                ),
                &["duty"],
            )?,
            changes: IntCounterVec::new(
                Opts::new(
                    "duty_leadership_changes_total",
                    "One-replica duty leadership gained or lost by this replica",
                ),
                &["duty", "change"],
            )?,
        };
        registry.register(Box::new(m.leader.clone()))?;
        registry.register(Box::new(m.changes.clone()))?;
        for d in DUTIES {
            m.leader.with_label_values(&[d]).set(0);
        }
        Ok(m)
    }
}

/// What a claim attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// This replica leads.
    Leading,
    /// Another replica holds the lease.
    Elsewhere { owner: String },
    /// The claim failed (database unreachable, …): not leading.
    Unknown { error: String },
}

/// One duty's lease, as seen by this replica (cheap to clone).
#[derive(Clone)]
pub struct Duty {
    name: &'static str,
    store: SharedStore,
    metrics: Option<DutyMetrics>,
    log: Logger,
    leading: Arc<AtomicBool>,
}

impl std::fmt::Debug for Duty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Duty").field("name", &self.name).finish()
    }
}

/// What a claim result means for the duty (pure).
pub fn leadership(held: bool, claim: impl FnOnce() -> Result<(), StoreError>) -> Leadership {
    if held {
        return Leadership::Leading;
    }
    match claim() {
        Ok(()) => Leadership::Leading,
        Err(StoreError::LeaseHeld { owner, .. }) => Leadership::Elsewhere { owner },
        Err(e) => Leadership::Unknown {
            error: e.to_string(),
        },
    }
}

impl Duty {
    pub fn new(
        name: &'static str,
        store: SharedStore,
        metrics: Option<DutyMetrics>,
        log: Logger,
    ) -> Duty {
        Duty {
            name,
            store,
            metrics,
            log,
            leading: Arc::default(),
        }
    }

    /// The lease id (fences this duty's writes: `Store::put_fenced`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether this replica runs the duty now: it holds the lease, or claims it. Blocks for the
    /// claim's round trip when the lease is not held.
    pub fn lead(&self) -> Leadership {
        let store = self.store.clone();
        let name = self.name;
        let now = leadership(store.holds_lease(name), || store.claim_escrow(name));
        let leading = now == Leadership::Leading;
        if self.leading.swap(leading, Ordering::SeqCst) != leading {
            let change = if leading { "gained" } else { "lost" };
            info!(self.log, "one-replica duty leadership changed";
                "stage" => "duty_leadership_changed", "duty" => name, "change" => change,
                "now" => ?now);
            if let Some(m) = &self.metrics {
                m.changes.with_label_values(&[name, change]).inc();
            }
        }
        if let Leadership::Unknown { error } = &now {
            warn!(self.log, "one-replica duty not claimed"; "stage" => "duty_claim_failed",
                "duty" => name, "error" => error);
        }
        if let Some(m) = &self.metrics {
            m.leader.with_label_values(&[name]).set(i64::from(leading));
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lease_leads_without_a_claim_and_a_live_one_elsewhere_does_not() {
        let unreachable = || -> Result<(), StoreError> { panic!("no claim while held") };
        assert_eq!(leadership(true, unreachable), Leadership::Leading);
        assert_eq!(leadership(false, || Ok(())), Leadership::Leading);
        let held = || {
            Err(StoreError::LeaseHeld {
                escrow: ROTATION.into(),
                owner: "b".into(),
            })
        };
        assert_eq!(
            leadership(false, held),
            Leadership::Elsewhere { owner: "b".into() }
        );
        let down = || Err(StoreError::Io("down".into()));
        assert!(matches!(
            leadership(false, down),
            Leadership::Unknown { .. }
        ));
        assert!(DUTIES.iter().all(|d| is_duty(d)));
        assert!(!is_duty("42"));
    }
}
