//! Chain polling in the process (`docs/settings-and-polling.md`): the effective chain poll
//! settings, the one `ChainPoller` of `public_api_url`, and the cached `ChainView` that every
//! HTTP worker reads to gate new chat requests during PoC.
//!
//! - **Settings, per field**: defaults < `[chain_poll]` of the file < changes persisted by
//!   `PUT /v1/admin/settings` (record `settings`/`chain_poll`: only the fields an admin sent) <
//!   environment (a field set by the environment is pinned and never taken from the record).
//!   Persisted changes that no longer validate against the file and environment are ignored at
//!   start (logged, `stage=chain_poll_settings_invalid`).
//! - **The poller**: started once at start when `public_api_url` is set, with one `HostGates`
//!   and the chain metrics registered into the process registry. Its versions polls are scoped
//!   to the hosts of the registered escrows (refreshed every [`SCOPE_REFRESH`]).
//! - **The cached view**: a tiny `ViewCache` actor subscribed to the poller stores every pushed
//!   `Arc<ChainView>` in a `RwLock` shared by every worker thread. Reading it never sends a
//!   request and never waits for an actor. [`ChainPolling::participants`] waits (bounded) for
//!   the first participants snapshot: escrow registration takes the participants from there and
//!   never reads the public API itself.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use actix::prelude::*;
use devshard_actors::{
    chain::{
        ApplyPollSettings, ChainChanged, ChainMetrics, ChainPollSettings, ChainPoller,
        ChainPollerDeps, ChainView, HostGates, SetVersionsScope, Subscribe,
    },
    clock::SharedClock,
    directory::Directory,
    stats::{ActorRegistry, TrackedActor, TrackedAddr},
    store::{ns, SharedStore},
};
use prometheus::Registry;
use serde_json::{Map, Value};
use slog::{error, info, Logger};

use crate::{
    config::{ChainPollConfig, ConfigError},
    escrows,
};

/// Key of the persisted admin changes in namespace `settings`.
pub const CHAIN_POLL_KEY: &str = "chain_poll";
/// How often the versions scope is recomputed from the registered escrows.
pub const SCOPE_REFRESH: Duration = Duration::from_secs(60);

/// Fields an admin changed (JSON object of `ChainPollSettings` fields).
pub type Overrides = Map<String, Value>;

#[derive(Debug, Default)]
struct Live {
    settings: ChainPollSettings,
    overrides: Overrides,
}

/// What the HTTP edge holds of chain polling (cheap to clone).
#[derive(Clone)]
pub struct ChainPolling {
    /// File + environment: what a field returns to when its persisted change is removed.
    configured: Arc<ChainPollSettings>,
    poller: Option<TrackedAddr<ChainPoller>>,
    view: Arc<RwLock<Option<Arc<ChainView>>>>,
    live: Arc<RwLock<Live>>,
    pinned: Arc<BTreeMap<String, String>>,
    update: Arc<tokio::sync::Mutex<()>>,
    /// Woken on every pushed view.
    pushed: Arc<tokio::sync::Notify>,
    /// A wait for the first participants timed out: later registrations do not wait again.
    gave_up_waiting: Arc<std::sync::atomic::AtomicBool>,
    /// The view cache (recomputes the versions scope on demand).
    cache: Option<Recipient<RefreshScope>>,
}

/// `base` with the `overrides` that the environment does not pin, validated.
pub fn layer(
    base: &ChainPollSettings,
    overrides: &Overrides,
    pinned: &BTreeMap<String, String>,
) -> Result<ChainPollSettings, String> {
    let Value::Object(mut merged) = serde_json::to_value(base).map_err(|e| e.to_string())? else {
        return Err("chain poll settings do not serialize to an object".into());
    };
    for (k, v) in overrides {
        if !pinned.contains_key(k) {
            merged.insert(k.clone(), v.clone());
        }
    }
    let s: ChainPollSettings =
        serde_json::from_value(Value::Object(merged)).map_err(|e| e.to_string())?;
    s.validate().map_err(|e| e.0)?;
    Ok(s)
}

/// The settings to start with and the persisted overrides (see the module docs).
fn effective(
    config: &ChainPollConfig,
    store: &SharedStore,
    log: &Logger,
) -> (ChainPollSettings, Overrides) {
    let stored = match store.get(ns::SETTINGS, CHAIN_POLL_KEY) {
        Ok(Some(Value::Object(m))) => m,
        Ok(None) => return (config.settings.clone(), Overrides::new()),
        Ok(Some(other)) => {
            error!(log, "persisted chain poll settings are not an object; ignored";
                "stage" => "chain_poll_settings_invalid", "value" => %other);
            return (config.settings.clone(), Overrides::new());
        }
        Err(e) => {
            error!(log, "persisted chain poll settings unreadable; ignored";
                "stage" => "chain_poll_settings_invalid", "error" => %e);
            return (config.settings.clone(), Overrides::new());
        }
    };
    match layer(&config.settings, &stored, &config.pinned) {
        Ok(s) => {
            let fields: Vec<&str> = stored.keys().map(String::as_str).collect();
            info!(log, "persisted chain poll settings applied";
                "stage" => "chain_poll_settings_loaded", "fields" => fields.join(","),
                "pinned_by_env" => config.pinned.keys().cloned().collect::<Vec<_>>().join(","));
            (s, stored)
        }
        Err(e) => {
            error!(log, "persisted chain poll settings ignored: invalid with this file and environment";
                "stage" => "chain_poll_settings_invalid", "error" => e);
            (config.settings.clone(), Overrides::new())
        }
    }
}

impl ChainPolling {
    /// Effective settings from the configuration and the store; no poller yet.
    pub fn load(config: &ChainPollConfig, store: &SharedStore, log: &Logger) -> ChainPolling {
        let (settings, overrides) = effective(config, store, log);
        ChainPolling {
            configured: Arc::new(config.settings.clone()),
            poller: None,
            view: Arc::new(RwLock::new(None)),
            live: Arc::new(RwLock::new(Live {
                settings,
                overrides,
            })),
            pinned: Arc::new(config.pinned.clone()),
            update: Arc::new(tokio::sync::Mutex::new(())),
            pushed: Arc::new(tokio::sync::Notify::new()),
            gave_up_waiting: Arc::default(),
            cache: None,
        }
    }

    /// Recomputes the versions scope now (after escrows were registered).
    pub fn refresh_scope(&self) {
        if let Some(c) = &self.cache {
            c.do_send(RefreshScope);
        }
    }

    /// The latest participants snapshot, waiting up to `wait` for the first one (`None` without
    /// a poller, or when none arrived in time; after one such timeout, later calls do not wait).
    pub async fn participants(&self, wait: Duration) -> Option<Arc<ChainView>> {
        self.poller.as_ref()?;
        let ready = || self.view().filter(|v| v.participants.is_some());
        if self
            .gave_up_waiting
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return ready();
        }
        let waiting = async {
            loop {
                let pushed = self.pushed.notified();
                if let Some(v) = ready() {
                    return v;
                }
                pushed.await;
            }
        };
        match tokio::time::timeout(wait, waiting).await {
            Ok(v) => Some(v),
            Err(_) => {
                self.gave_up_waiting
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                ready()
            }
        }
    }

    /// The poller, when `public_api_url` is set.
    pub fn poller(&self) -> Option<&TrackedAddr<ChainPoller>> {
        self.poller.as_ref()
    }

    /// The latest view the poller pushed (`None` before the first, or without a poller).
    pub fn view(&self) -> Option<Arc<ChainView>> {
        self.view
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The settings in force.
    pub fn settings(&self) -> ChainPollSettings {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .settings
            .clone()
    }

    /// The settings of the file and the environment, without persisted admin changes.
    pub fn configured(&self) -> &ChainPollSettings {
        &self.configured
    }

    /// The persisted admin changes.
    pub fn overrides(&self) -> Overrides {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .overrides
            .clone()
    }

    /// Field → the environment variable that pins it.
    pub fn pinned(&self) -> &BTreeMap<String, String> {
        &self.pinned
    }

    /// Records new settings (already persisted and applied to the poller).
    pub fn set(&self, settings: ChainPollSettings, overrides: Overrides) {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        live.settings = settings;
        live.overrides = overrides;
    }

    /// Takes the admin changes the store holds now (another replica made them) and applies
    /// them to the poller; `Ok(true)` when the settings in force changed.
    pub async fn reload(&self, store: &SharedStore, log: &Logger) -> Result<bool, String> {
        let _one = self.lock_updates().await;
        let config = ChainPollConfig {
            settings: (*self.configured).clone(),
            pinned: (*self.pinned).clone(),
        };
        let (settings, overrides) = effective(&config, store, log);
        if settings == self.settings() {
            return Ok(false);
        }
        if let Some(p) = self.poller() {
            p.send(ApplyPollSettings(settings.clone()))
                .timeout(super::ACTOR_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.0)?;
        }
        self.set(settings, overrides);
        Ok(true)
    }

    /// Serializes settings updates (read, merge, persist, apply).
    pub async fn lock_updates(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.update.lock().await
    }

    /// Starts the poller of `api` and the view cache (inside the actix system).
    pub fn start_poller(
        &mut self,
        api: &str,
        wiring: PollerWiring<'_>,
    ) -> Result<TrackedAddr<ChainPoller>, PollerError> {
        let PollerWiring {
            registry,
            clock,
            log,
            directory,
            store,
            actors,
        } = wiring;
        let settings = self.settings();
        let gates = HostGates::new(&settings);
        let metrics =
            ChainMetrics::register(registry).map_err(|e| PollerError::Metrics(e.to_string()))?;
        let deps = ChainPollerDeps {
            clock,
            log: log.clone(),
            metrics,
            gates,
            actors: actors.clone(),
        };
        let poller = ChainPoller::new(api, settings, deps)
            .map_err(|e| {
                PollerError::Config(ConfigError::Invalid {
                    key: "public_api_url",
                    message: e.to_string(),
                })
            })?
            .start_tracked();
        let cache = ViewCache {
            view: self.view.clone(),
            pushed: self.pushed.clone(),
            poller: poller.clone(),
            directory,
            store,
            scope: None,
            log: log.clone(),
        }
        .start();
        poller.do_send(Subscribe(cache.clone().recipient()));
        self.cache = Some(cache.recipient());
        self.poller = Some(poller.clone());
        Ok(poller)
    }
}

/// Why [`ChainPolling::start_poller`] failed (the process maps it into its `AppError`).
#[derive(Debug, thiserror::Error)]
pub enum PollerError {
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// What [`ChainPolling::start_poller`] wires the poller and its view cache to.
pub struct PollerWiring<'a> {
    /// The process registry (chain metrics).
    pub registry: &'a Registry,
    pub clock: SharedClock,
    pub log: &'a Logger,
    /// For the versions scope (hosts of the registered escrows).
    pub directory: TrackedAddr<Directory>,
    pub store: SharedStore,
    /// The actor registry (the poller's stats).
    pub actors: &'a ActorRegistry,
}

/// Keeps the latest pushed view, and the poller's versions scope in line with the registered
/// escrows' hosts. Stops once the poller is gone.
struct ViewCache {
    view: Arc<RwLock<Option<Arc<ChainView>>>>,
    pushed: Arc<tokio::sync::Notify>,
    poller: TrackedAddr<ChainPoller>,
    directory: TrackedAddr<Directory>,
    store: SharedStore,
    scope: Option<BTreeSet<String>>,
    log: Logger,
}

impl ViewCache {
    fn refresh_scope(&mut self, ctx: &mut Context<Self>) {
        let directory = self.directory.clone();
        let store = self.store.clone();
        let hosts = async move { escrow_hosts(&directory, &store).await };
        ctx.spawn(hosts.into_actor(self).map(|hosts, act, _| {
            let Some(hosts) = hosts else { return };
            if act.scope.as_ref() != Some(&hosts) {
                info!(act.log, "versions polling scoped to the escrows' hosts";
                    "stage" => "chain_versions_scope", "hosts" => hosts.len());
                act.poller.do_send(SetVersionsScope(Some(hosts.clone())));
                act.scope = Some(hosts);
            }
        }));
    }
}

/// Addresses of every host of every registered escrow (`None` if the directory did not answer).
async fn escrow_hosts(
    directory: &TrackedAddr<Directory>,
    store: &SharedStore,
) -> Option<BTreeSet<String>> {
    let statuses = escrows::statuses(directory).await.ok()?;
    let mut out = BTreeSet::new();
    for s in statuses {
        if let Ok(Some(info)) = escrows::stored_info(store, &s.id) {
            out.extend(info.hosts.iter().map(|h| h.address.to_string()));
        }
    }
    Some(out)
}

impl Actor for ViewCache {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.refresh_scope(ctx);
        ctx.run_interval(SCOPE_REFRESH, |act, ctx| {
            if act.poller.connected() {
                act.refresh_scope(ctx);
            } else {
                ctx.stop();
            }
        });
    }
}

/// Recompute the versions scope from the registered escrows.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RefreshScope;

impl Handler<RefreshScope> for ViewCache {
    type Result = ();

    fn handle(&mut self, _: RefreshScope, ctx: &mut Context<Self>) {
        self.refresh_scope(ctx);
    }
}

impl Handler<ChainChanged> for ViewCache {
    type Result = ();

    fn handle(&mut self, msg: ChainChanged, _: &mut Context<Self>) {
        *self.view.write().unwrap_or_else(PoisonError::into_inner) = Some(msg.view);
        self.pushed.notify_waiters();
    }
}
