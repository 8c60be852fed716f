//! What every HTTP handler gets: [`AppState`] (cheap to clone: handles and `Arc`s), built once
//! by [`AppState::new`] from the configuration and the running pieces ([`StateParts`]), and the
//! shared parts it holds:
//!
//! - [`accounting`]: the request table and idempotency index (`[accounting]`).
//! - [`polling`]: the chain poller, its cached view and the chain poll settings in force.
//! - [`ledger`]: the durable cost ledger (one row per request and per attempt).
//! - [`series`]: the live page's 15-minute ring buffer and its sampler.
//! - [`settlements`]: the settlement actors, resumed at start, and auto-settle.
//!
//! This module imports nothing from `crate::app` (process wiring) or `crate::http` (handlers):
//! both depend on it, never the other way round.

pub mod accounting;
pub mod ledger;
pub mod polling;
pub mod series;
pub mod settlements;

use std::{
    collections::BTreeSet,
    sync::{atomic::AtomicU64, Arc, Mutex},
    time::Duration,
};

use devshard_actors::{
    clock::SharedClock,
    directory::{Directory, EscrowBoard},
    metrics::ActorMetrics,
    protocol::crypto::Address,
    race::RaceLimits,
    stats::{ActorRegistry, TrackedAddr},
    store::SharedStore,
};
use prometheus::Registry;
use slog::Logger;
use tokio::sync::Semaphore;

pub use self::polling::ChainPolling;
use crate::{
    chain::ChainClient,
    config::{AccessConfig, Config, Secret},
    metrics::HttpMetrics,
};

/// Ids of deactivated escrows (skipped by new requests; see `http::operator`). Persisted in
/// [`NS_DEACTIVATED`] before the set changes, loaded at start.
pub type Deactivated = Arc<Mutex<BTreeSet<String>>>;

/// Store namespace of deactivated escrows: key = escrow id.
pub const NS_DEACTIVATED: &str = "escrow_deactivated";

/// The deactivated escrows persisted by earlier runs.
fn load_deactivated(store: &SharedStore, log: &Logger) -> Deactivated {
    let ids = match store.list(NS_DEACTIVATED) {
        Ok(rows) => rows.into_iter().map(|(id, _)| id).collect(),
        Err(e) => {
            slog::error!(log, "deactivated escrows not loaded"; "error" => %e);
            BTreeSet::new()
        }
    };
    Arc::new(Mutex::new(ids))
}

/// Limits that shape a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatLimits {
    pub default_max_tokens: u64,
    pub max_tokens_cap: u64,
}

/// How long a handler waits for an actor's answer (directory, escrow snapshot).
pub const ACTOR_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the admin listing waits for one escrow's snapshot.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(1);

/// Bearer keys.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// `None`: the admin surface answers 404.
    pub admin: Option<Secret>,
    /// Empty: chat is open.
    pub api_keys: Vec<Secret>,
}

/// What shapes requests.
#[derive(Debug, Clone)]
pub struct EdgeLimits {
    pub chat: ChatLimits,
    pub default_model: Option<String>,
    pub max_body_bytes: usize,
    pub race: RaceLimits,
    /// The concurrent-race limit (`/v1/status`).
    pub max_concurrent_races: usize,
    /// Fields forced upstream, per model.
    pub shaping: crate::config::operator::ShapingConfig,
}

/// Everything a handler needs (cheap to clone: handles and `Arc`s). Never holds the key itself,
/// only its address.
#[derive(Clone)]
pub struct AppState {
    pub directory: TrackedAddr<Directory>,
    /// The escrows and models the directory last published: the chat path reads them and
    /// picks its escrow without a message (`devshard_actors::directory::EscrowBoard`).
    pub board: EscrowBoard,
    /// Every live actor's stats (the debug listing reads it without messaging the actors).
    pub actors: ActorRegistry,
    pub store: SharedStore,
    pub chain: ChainClient,
    pub limits: EdgeLimits,
    pub auth: Auth,
    pub metrics: HttpMetrics,
    /// The actors' metric handles (races count their doubtful winners).
    pub actor_metrics: ActorMetrics,
    pub registry: Registry,
    /// Address of the operator's key (escrow creator check).
    pub signer: Address,
    pub clock: SharedClock,
    pub log: Logger,
    /// Race ids (unique per process).
    pub race_ids: Arc<AtomicU64>,
    /// Sequence of generated request ids.
    pub request_seq: Arc<AtomicU64>,
    /// The hard ceiling on races in flight (`max_concurrent_races`, streams included).
    pub races: Arc<Semaphore>,
    /// The adaptive limit on races starting, with its queue (`[overload]`).
    pub overload: crate::overload::Limiter,
    /// Unix seconds at start (`created` of `/v1/models` entries).
    pub started_at_s: i64,
    /// Chain poll settings, the poller (when `public_api_url` is set) and its latest view.
    pub polling: ChainPolling,
    /// Per-model access modes.
    pub access: AccessConfig,
    /// The request table and idempotency index (`[accounting]`).
    pub accounting: accounting::Accounting,
    /// Escrows an admin deactivated (skipped by new requests; see `http::operator`).
    pub deactivated: Deactivated,
    /// The cost ledger (`None` until the process opened it: tests that build a bare state).
    pub ledger: Option<ledger::Ledger>,
    /// The PostgreSQL stage of `/readyz` (`None`: SQLite, or a bare test state).
    pub replica_readiness: Option<crate::http::readiness::ReplicaReadiness>,
    /// The other replicas on the same PostgreSQL database: forwarding and shared health
    /// (`None`: SQLite, or a bare test state).
    pub replicas: Option<crate::replicas::Replicas>,
    /// The live page's 15-minute series.
    pub series: series::Series,
    /// Settlement actors (`http::settlement`).
    pub settlements: settlements::Settlements,
    /// Escrow creation and rotation (`crate::rotation`).
    pub rotation: crate::rotation::Rotation,
    /// The one-replica duties' metrics (`crate::store::duty`; `None` if already registered).
    pub duty_metrics: Option<crate::store::duty::DutyMetrics>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("signer", &self.signer)
            .field("limits", &self.limits)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// The parts of [`AppState`] that are not in the [`Config`].
pub struct StateParts {
    pub directory: TrackedAddr<Directory>,
    /// Taken from the directory before it started ([`Directory::board`]).
    pub board: EscrowBoard,
    /// The registry the directory was given (races register here too).
    pub actors: ActorRegistry,
    pub store: SharedStore,
    pub metrics: HttpMetrics,
    pub actor_metrics: ActorMetrics,
    pub registry: Registry,
    pub clock: SharedClock,
    pub log: Logger,
}

impl AppState {
    /// Builds the state from the configuration and the running pieces.
    pub fn new(config: &Config, parts: StateParts) -> AppState {
        let started_at_s = parts.clock.now_unix();
        let deactivated = load_deactivated(&parts.store, &parts.log);
        let polling = ChainPolling::load(&config.chain_poll, &parts.store, &parts.log);
        let settlements = settlements::Settlements::new(
            config,
            parts.store.clone(),
            parts.directory.clone(),
            parts.board.clone(),
            parts.clock.clone(),
            &parts.registry,
            parts.log.clone(),
        );
        settlements.resume();
        settlements.spawn_auto_settle();
        let chain = ChainClient::new(config.chain.clone(), parts.log.clone());
        let duty_metrics = crate::store::duty::DutyMetrics::register(&parts.registry).ok();
        let rotation = crate::rotation::Rotation::new(
            config,
            parts.store.clone(),
            parts.clock.clone(),
            (&parts.registry, duty_metrics.clone()),
            crate::rotation::creator::Registrar {
                chain: chain.clone(),
                directory: parts.directory.clone(),
                store: parts.store.clone(),
                signer: config.key.address().clone(),
                polling: polling.clone(),
            },
            parts.log.clone(),
        );
        let overload = crate::overload::Limiter::new(
            config.overload.clone(),
            config.max_concurrent_races,
            parts.metrics.clone(),
            parts.log.clone(),
        );
        AppState {
            directory: parts.directory,
            board: parts.board,
            actors: parts.actors,
            store: parts.store,
            chain,
            limits: EdgeLimits {
                chat: ChatLimits {
                    default_max_tokens: config.default_max_tokens,
                    max_tokens_cap: config.max_tokens_cap,
                },
                default_model: config.default_model.clone(),
                max_body_bytes: config.max_body_bytes,
                race: config.race,
                max_concurrent_races: config.max_concurrent_races,
                shaping: config.shaping.clone(),
            },
            auth: Auth {
                admin: config.admin_api_key.clone(),
                api_keys: config.api_keys.clone(),
            },
            metrics: parts.metrics,
            actor_metrics: parts.actor_metrics,
            registry: parts.registry,
            signer: config.key.address().clone(),
            clock: parts.clock,
            log: parts.log,
            race_ids: Arc::new(AtomicU64::new(1)),
            request_seq: Arc::new(AtomicU64::new(0)),
            races: Arc::new(Semaphore::new(config.max_concurrent_races)),
            overload,
            started_at_s,
            polling,
            access: config.access.clone(),
            accounting: accounting::Accounting::new(config.accounting),
            deactivated,
            ledger: None,
            replica_readiness: None,
            replicas: None,
            series: series::Series::default(),
            settlements,
            rotation,
            duty_metrics,
        }
    }
}
