//! Creating escrows on chain and rotating them per model (docs/lifecycle.md §4).
//!
//! # Layout
//! - [`intent`]: the durable creation intent and the pure reconcile decision.
//! - [`creator`]: sign `MsgCreateDevshardEscrow`, persist, broadcast, reconcile, register.
//! - [`deposits`]: today's deposits per model, persisted (the daily cap survives a restart).
//! - [`settings`]: `[rotation]` / the `rotation` section of the admin settings.
//! - [`plan`]: pure decisions (roles, create now?, retire which, back-off).
//! - [`runway`]: pure: the nonces a model's serving escrows have left against `margin_s`, the
//!   spares short-lived escrows need and which low escrows may retire.
//! - [`retention`]: pure: which settled escrows go now (`settled_retention_s`), removed through
//!   `crate::escrow_removal` like an admin's `DELETE`.
//! - [`actor`]: [`RotationActor`](actor::RotationActor), the periodic check; `check`: one
//!   model's check and the view it leaves.
//! - [`remote`]: the budget of an escrow another replica runs (pure: freshness, estimate).
//! - [`metrics`]: `escrow_creations_total{result}`, `rotation_deposit_today{model}`,
//!   `rotations_total{model,why}`, `rotation_runway_seconds{model}`,
//!   `rotation_serving_escrows{model}`, `rotation_backing_off{model}`,
//!   `rotation_budget_sources{source}`.
//!
//! [`Rotation`] is the handle the HTTP layer holds: the creator, the settings in force and the
//! actor's address.

pub mod actor;
mod burn;
mod check;
pub mod creator;
pub mod deposits;
mod facts;
pub mod intent;
pub mod metrics;
pub mod plan;
pub mod remote;
pub mod retention;
pub mod runway;
pub mod settings;

use std::sync::{Arc, OnceLock, RwLock};

use actix::{Actor, Addr};
use devshard_actors::{
    clock::SharedClock,
    directory::EscrowBoard,
    settlement::chain::ChainTxClient,
    store::{ns, SharedStore},
};
use slog::{warn, Logger};

use self::{
    actor::{GetRotation, Kick, RotationActor, RotationView},
    creator::{Creator, Registrar},
    deposits::Deposits,
    metrics::RotationMetrics,
    settings::RotationSettings,
};
use crate::{
    config::Config,
    state::{settlements::Settlements, Deactivated},
    store::duty::{self, Duty, DutyMetrics},
};

/// Store namespace of creations that ended with a registered escrow (key = tx hash).
pub const NS_CREATED: &str = "escrow_created";
/// Key of the admin's rotation settings in the `settings` namespace (they win over the file).
pub const ROTATION_KEY: &str = "rotation";

/// Why an escrow could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    #[error("the creation tx was not signed: the chain cannot be read ({0})")]
    ChainUnavailable(String),
    #[error("the chain refused the creation tx (code {code}): {log}")]
    Refused { code: u32, log: String },
    #[error("the creation tx did not create an escrow: {0}")]
    Failed(String),
    #[error("the creation intent was not persisted: {0}")]
    Store(String),
    #[error("{0}")]
    Invalid(String),
    /// Another replica runs the rotation (it alone creates escrows: deposits are paid once).
    #[error(
        "escrows are created by replica {owner}, which runs the rotation; retry there or later"
    )]
    NotLeader { owner: String },
}

/// The rotation handle (cheap to clone).
#[derive(Clone)]
pub struct Rotation {
    pub creator: Creator,
    settings: Arc<RwLock<RotationSettings>>,
    addr: Arc<OnceLock<Addr<RotationActor>>>,
}

impl std::fmt::Debug for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rotation").finish_non_exhaustive()
    }
}

impl Rotation {
    /// The handle; the settings are the admin's persisted ones, else the file's.
    pub fn new(
        config: &Config,
        store: SharedStore,
        clock: SharedClock,
        (registry, duty_metrics): (&prometheus::Registry, Option<DutyMetrics>),
        registrar: Registrar,
        log: Logger,
    ) -> Rotation {
        let metrics = RotationMetrics::register(registry).ok();
        let persisted = store
            .get(ns::SETTINGS, ROTATION_KEY)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value::<RotationSettings>(v).ok())
            .filter(|s| s.validate().is_ok());
        let settings = persisted.unwrap_or_else(|| config.rotation.clone());
        let creator = Creator {
            duty: Duty::new(duty::ROTATION, store.clone(), duty_metrics, log.clone()),
            store: store.clone(),
            chain: ChainTxClient {
                rest_url: config.chain.rest_url.clone(),
                timeout: config.chain.timeout,
            },
            key: (*config.key).clone(),
            tx: config.settlement.tx(),
            clock: clock.clone(),
            log,
            metrics: metrics.clone(),
            registrar,
            deposits: Deposits {
                store,
                clock,
                metrics,
            },
            lock: Arc::default(),
        };
        Rotation {
            creator,
            settings: Arc::new(RwLock::new(settings)),
            addr: Arc::default(),
        }
    }

    /// Starts the actor on the current arbiter (its first check reconciles open intents); it
    /// reads the escrows' live budgets from `board`, and those other replicas run from what
    /// they publish (`replicas`, PostgreSQL); `remover` removes settled escrows once their
    /// retention is over.
    pub fn start(
        &self,
        settlements: Settlements,
        deactivated: Deactivated,
        max_tokens_cap: u64,
        (board, replicas): (EscrowBoard, Option<crate::replicas::Replicas>),
        remover: crate::escrow_removal::Remover,
    ) {
        let actor = RotationActor::new(
            self.clone(),
            settlements,
            deactivated,
            max_tokens_cap,
            (board, replicas),
            remover,
        );
        let _ = self.addr.set(actor.start());
    }

    /// The settings in force.
    pub fn settings(&self) -> RotationSettings {
        self.settings
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// True when `model` rotates.
    pub fn enabled_for(&self, model: &str) -> bool {
        self.settings().model(model).is_some()
    }

    /// Takes the settings the store holds when they are valid and differ from those in force
    /// (another replica changed them), and runs a check now; `true` when they changed.
    pub fn reload(&self) -> bool {
        let stored = self
            .creator
            .store
            .get(ns::SETTINGS, ROTATION_KEY)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value::<RotationSettings>(v).ok())
            .filter(|s| s.validate().is_ok());
        let Some(stored) = stored.filter(|s| *s != self.settings()) else {
            return false;
        };
        match self.settings.write() {
            Ok(mut s) => *s = stored,
            Err(p) => *p.into_inner() = stored,
        }
        if let Some(a) = self.addr.get() {
            a.do_send(Kick);
        }
        true
    }

    /// Persists `settings` (valid), applies them and runs a check now.
    pub async fn apply(&self, settings: RotationSettings) -> Result<(), CreateError> {
        let value =
            serde_json::to_value(&settings).map_err(|e| CreateError::Store(e.to_string()))?;
        self.creator
            .store
            .put(ns::SETTINGS, ROTATION_KEY, value)
            .await
            .map_err(|e| CreateError::Store(e.to_string()))?;
        match self.settings.write() {
            Ok(mut s) => *s = settings,
            Err(p) => *p.into_inner() = settings,
        }
        if let Some(a) = self.addr.get() {
            a.do_send(Kick);
        } else {
            warn!(
                self.creator.log,
                "rotation settings applied before the actor started"
            );
        }
        Ok(())
    }

    /// The last check's view (`None` when the actor does not answer).
    pub async fn view(&self) -> Option<RotationView> {
        let a = self.addr.get()?;
        a.send(GetRotation)
            .timeout(crate::state::ACTOR_TIMEOUT)
            .await
            .ok()
    }
}
