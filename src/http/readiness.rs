//! The PostgreSQL stage of `GET /readyz` (`crate::store::postgres::readiness`): a replica on
//! PostgreSQL is ready only while its database answers and its escrow leases are claimed and
//! renewed and its first ownership round ran. SQLite has no such stage (`AppState::replica_readiness` is `None`).
//!
//! | metric | type |
//! |---|---|
//! | `devshard_replica_readiness_checks_total{outcome}` | counter: checks of this stage, by outcome (`ready`, `database_unreachable`, `ownership_pending`, `leases_stale`) |
//!
//! Log: stage `replica_readiness_changed` when the outcome differs from the previous check's.

use std::sync::{Arc, Mutex};

use prometheus::{IntCounterVec, Opts, Registry};
use slog::{info, warn, Logger};

use crate::store::{
    postgres::readiness::{NotReady, OUTCOMES},
    GatewayStore,
};

/// The stage, with its metric and the previous outcome (for the transition log).
#[derive(Clone)]
pub struct ReplicaReadiness {
    store: Arc<GatewayStore>,
    checks: IntCounterVec,
    last: Arc<Mutex<&'static str>>,
    log: Logger,
}

impl std::fmt::Debug for ReplicaReadiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaReadiness").finish_non_exhaustive()
    }
}

impl ReplicaReadiness {
    /// The stage for `store` when it is PostgreSQL (`None` for SQLite), its metric registered.
    pub fn for_store(
        store: Arc<GatewayStore>,
        registry: &Registry,
        log: Logger,
    ) -> prometheus::Result<Option<ReplicaReadiness>> {
        if !matches!(*store, GatewayStore::Postgres(_)) {
            return Ok(None);
        }
        let checks = IntCounterVec::new(
            Opts::new(
                "replica_readiness_checks_total",
                "Readiness checks of a PostgreSQL replica (database and leases), by outcome",
            ),
            &["outcome"],
        )?;
        registry.register(Box::new(checks.clone()))?;
        for outcome in OUTCOMES {
            checks.with_label_values(&[outcome]);
        }
        Ok(Some(ReplicaReadiness {
            store,
            checks,
            last: Arc::new(Mutex::new("starting")),
            log,
        }))
    }

    /// Runs the stage: `Ok` when ready.
    pub async fn check(&self) -> Result<(), NotReady> {
        let outcome = match &*self.store {
            GatewayStore::Postgres(pg) => pg.readiness().await,
            GatewayStore::Sqlite(_) => Ok(()),
        };
        let code = outcome.as_ref().err().map_or("ready", NotReady::code);
        self.checks.with_label_values(&[code]).inc();
        let previous = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *last, code)
        };
        if previous != code {
            match &outcome {
                Ok(()) => info!(self.log, "replica ready"; "stage" => "replica_readiness_changed",
                    "outcome" => code, "previous" => previous),
                Err(e) => {
                    warn!(self.log, "replica not ready"; "stage" => "replica_readiness_changed",
                    "outcome" => code, "previous" => previous, "reason" => %e)
                }
            }
        }
        outcome
    }
}
