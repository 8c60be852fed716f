//! Start, run and stop the gateway process.
//!
//! [`start`] opens `gateway.db` in the data directory, starts the `Directory` (which loads the
//! registered escrows from the store), registers the configured escrows that are new (failures
//! are logged; the others are served), starts the chain poller when `public_api_url` is set
//! ([`super::polling`]), binds the listener and returns a [`RunningGateway`].
//! [`run`] is `start` plus waiting for SIGTERM/SIGINT, then a graceful stop: no new
//! connections, running requests (open streams included) get `shutdown_grace` to finish, then
//! the store is flushed and closed. [`serve`] wraps it all for `main` with exit codes.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
};

use actix_web::{dev::ServerHandle, HttpServer};
use devshard_actors::{
    chain::{ChainPoller, StopPoller},
    clock::{SharedClock, SystemClock},
    directory::{Directory, DirectoryDeps, GetEscrowStatuses},
    metrics::ActorMetrics,
    protocol::warm::{WarmKeyChecker, WarmKeyMetrics},
    stats::{ActorRegistry, TrackedActor, TrackedAddr},
    store::{SharedStore, Store, StoreError},
};
use prometheus::Registry;
use slog::{crit, info, warn, Logger};

use actix::Actor;

use super::build_app;
pub use super::error::AppError;
use super::error::EXIT_SOFTWARE;
use crate::state::{
    accounting::EndedHook,
    ledger::{Ledger, LedgerDeps},
    series::SeriesSampler,
};
use crate::{
    config::{process_env, Config, ConfigError, ENV_CONFIG},
    escrows,
    http::readiness::ReplicaReadiness,
    logging,
    metrics::{self, HttpMetrics},
    state::{polling::PollerWiring, AppState, StateParts},
    store::{
        duty::{self, Duty},
        ledger::LedgerStore,
        metrics::StoreMetrics,
        GatewayStore, StoreTarget,
    },
};

/// File name of the store inside the data directory.
pub const STORE_FILE: &str = "gateway.db";
/// How long the server keeps an idle client connection open (actix-web's default, stated so that
/// clients can keep their own reuse below it; see `crate::chaos::http::IDLE_REUSE`).
pub const SERVER_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);
/// Optional pieces for [`start_with`] (tests: a paused clock, a shared registry).
#[derive(Default)]
pub struct StartOptions {
    /// Defaults to a fresh registry with the process namespace.
    pub registry: Option<Registry>,
    /// Defaults to the system clock.
    pub clock: Option<SharedClock>,
}

/// A gateway serving on a bound socket.
pub struct RunningGateway {
    /// The bound address (the real port when the config asked for port 0).
    pub addr: SocketAddr,
    /// `http://{addr}`.
    pub url: String,
    pub directory: TrackedAddr<Directory>,
    pub store: Arc<GatewayStore>,
    /// The chain poller (when `public_api_url` is set).
    pub poller: Option<TrackedAddr<ChainPoller>>,
    /// Every live actor's stats (what `GET /v1/debug/actors` lists).
    pub actors: ActorRegistry,
    /// The cost ledger (stopped with the gateway).
    pub ledger: Ledger,
    handle: ServerHandle,
    server: actix_web::rt::task::JoinHandle<std::io::Result<()>>,
    log: Logger,
}

impl RunningGateway {
    /// Stops the server (`graceful`: running requests get the shutdown grace), then flushes and
    /// closes the store.
    pub async fn stop(self, graceful: bool) -> Result<(), AppError> {
        info!(self.log, "shutting down"; "stage" => "shutdown_started", "graceful" => graceful);
        if let Some(p) = &self.poller {
            p.do_send(StopPoller);
        }
        self.handle.stop(graceful).await;
        let served = self.server.await;
        let ledger = self.ledger.clone();
        let _ = actix_web::rt::task::spawn_blocking(move || ledger.stop()).await;
        let flushed = self.store.flush().await;
        let store = self.store.clone();
        let closed = actix_web::rt::task::spawn_blocking(move || store.close()).await;
        info!(self.log, "shut down"; "stage" => "shutdown_complete");
        flushed.map_err(|e| AppError::Flush(e.to_string()))?;
        closed
            .map_err(|e| AppError::Flush(e.to_string()))?
            .map_err(|e| AppError::Flush(e.to_string()))?;
        server_outcome(served)
    }

    /// Serves until `signal` resolves, then stops gracefully. If the server ends on its own
    /// first, the store is still flushed and the server's outcome returned.
    pub async fn serve_until(
        mut self,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<(), AppError> {
        tokio::select! {
            () = signal => {
                info!(self.log, "signal received; draining"; "stage" => "shutdown_signal");
                self.stop(true).await
            }
            served = &mut self.server => {
                crit!(self.log, "the HTTP server stopped by itself"; "stage" => "server_exited");
                let ledger = self.ledger.clone();
                let _ = actix_web::rt::task::spawn_blocking(move || ledger.stop()).await;
                let flushed = self.store.flush().await;
                server_outcome(served)?;
                flushed.map_err(|e| AppError::Flush(e.to_string()))
            }
        }
    }
}

type ServerJoin = Result<std::io::Result<()>, actix_web::rt::task::JoinError>;

/// The outcome of the server task.
fn server_outcome(served: ServerJoin) -> Result<(), AppError> {
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(AppError::Server(e.to_string())),
        Err(e) => Err(AppError::Server(e.to_string())),
    }
}

/// [`start_with`] with defaults.
pub async fn start(config: Config, log: Logger) -> Result<RunningGateway, AppError> {
    start_with(config, log, StartOptions::default()).await
}

/// Starts the gateway (see the module docs). Must run inside an actix `System`.
pub async fn start_with(
    config: Config,
    log: Logger,
    opts: StartOptions,
) -> Result<RunningGateway, AppError> {
    if let Some(ca) = &config.ca_file {
        let added =
            devshard_actors::tls::install_ca_file(ca).map_err(|e| ConfigError::Invalid {
                key: "ca_file",
                message: e.to_string(),
            })?;
        info!(log, "extra TLS roots trusted"; "stage" => "tls_roots", "ca_file" => %ca.display(),
            "certificates" => added);
    }
    let registry = match opts.registry {
        Some(r) => r,
        None => metrics::new_registry().map_err(|e| AppError::Metrics(e.to_string()))?,
    };
    let http_metrics =
        HttpMetrics::register(&registry).map_err(|e| AppError::Metrics(e.to_string()))?;
    let actor_metrics =
        ActorMetrics::register(&registry).map_err(|e| AppError::Metrics(e.to_string()))?;
    let clock = opts.clock.unwrap_or_else(|| Arc::new(SystemClock));
    let store = Arc::new(open_store(&config.store, &log)?);
    StoreMetrics::register(&registry, store.clone())
        .and_then(|()| crate::memory::MemoryMetrics::register(&registry))
        .and_then(|()| crate::recoveries::RecoveryMetrics::register(&registry))
        .map_err(|e| AppError::Metrics(e.to_string()))?;
    let shared: SharedStore = store.clone();
    info!(log, "store opened"; "stage" => "store_opened", "store" => config.store.describe());

    let warm_metrics =
        WarmKeyMetrics::register(&registry).map_err(|e| AppError::Metrics(e.to_string()))?;
    let warm = WarmKeyChecker::rest(
        &config.chain.rest_url,
        clock.clone(),
        warm_metrics,
        log.clone(),
    );
    let actors = ActorRegistry::default();
    let directory = Directory::new(DirectoryDeps {
        key: config.key.clone(),
        store: shared.clone(),
        clock: clock.clone(),
        log: log.clone(),
        escrow_cfg: config.escrow.clone(),
        budget: config.budget,
        fault_injection: config.fault_injection,
        metrics: actor_metrics.clone(),
        actors: actors.clone(),
        warm,
    });
    let board = directory.board();
    let directory = directory.start_tracked();
    let mut state = AppState::new(
        &config,
        StateParts {
            directory: directory.clone(),
            board,
            actors: actors.clone(),
            store: shared.clone(),
            metrics: http_metrics,
            actor_metrics,
            registry,
            clock,
            log: log.clone(),
        },
    );
    let ledger_tables = match &config.store {
        StoreTarget::Sqlite(path) => LedgerStore::open(path),
        StoreTarget::Postgres { target, .. } => LedgerStore::open_postgres(target, log.clone()),
    };
    let ledger_error = |e: StoreError| AppError::Store {
        path: config.data_dir.clone(),
        reason: format!("the cost ledger ({}): {e}", config.store.describe()),
    };
    let ledger_tables = ledger_tables.map_err(ledger_error)?;
    ledger_tables
        .register_metrics(&state.registry)
        .map_err(|e| AppError::Metrics(e.to_string()))?;
    let ledger = Ledger::start(
        ledger_tables,
        config.ledger,
        &config.api_keys,
        LedgerDeps {
            duty: Duty::new(
                duty::LEDGER_TAIL,
                shared.clone(),
                state.duty_metrics.clone(),
                log.clone(),
            ),
            store: shared.clone(),
            clock: state.clock.clone(),
            log: log.clone(),
        },
    )
    .map_err(ledger_error)?;
    let (hook, series) = (ledger.clone(), state.series.clone());
    state.accounting.on_ended(EndedHook(Arc::new(move |r| {
        hook.record(r);
        series.observe(r);
    })));
    SeriesSampler {
        series: state.series.clone(),
        registry: state.registry.clone(),
        board: state.board.clone(),
        clock: state.clock.clone(),
    }
    .start();
    state.ledger = Some(ledger.clone());
    state.replica_readiness =
        ReplicaReadiness::for_store(store.clone(), &state.registry, log.clone())
            .map_err(|e| AppError::Metrics(e.to_string()))?;
    state.replicas =
        crate::replicas::Replicas::for_store(store.clone(), &state.registry, log.clone())
            .await
            .map_err(|e| AppError::Metrics(e.to_string()))?;
    // The poller first: registration takes the participants from its first snapshot.
    let poller = match &config.chain.public_api_url {
        Some(api) => Some(state.polling.start_poller(
            api,
            PollerWiring {
                registry: &state.registry,
                clock: state.clock.clone(),
                log: &log,
                directory: directory.clone(),
                store: shared.clone(),
                actors: &actors,
            },
        )?),
        None => None,
    };
    // After the poller: a settings change another replica made is applied to it too.
    if let Some(replicas) = &state.replicas {
        let reloads = crate::replicas::Reloads {
            polling: state.polling.clone(),
            rotation: state.rotation.clone(),
            store: shared.clone(),
        };
        crate::replicas::start_sharing(replicas, directory.clone(), reloads, &log);
        crate::replicas::budgets::BudgetPublisher::start(
            replicas.clone(),
            state.board.clone(),
            &state.registry,
            log.clone(),
        );
    }
    escrows::register_configured(
        &state.chain,
        &directory,
        &shared,
        &state.signer,
        &state.polling,
        &config.escrows,
        &log,
    )
    .await;
    state.polling.refresh_scope();
    // After the configured escrows are registered: the first check counts them.
    state.rotation.start(
        state.settlements.clone(),
        state.deactivated.clone(),
        config.max_tokens_cap,
        (state.board.clone(), state.replicas.clone()),
        crate::escrow_removal::Remover::of(&state),
    );
    // The directory publishes its escrow board from `started()`: one round trip before the
    // listener opens, so the first request already picks among the stored escrows.
    if directory.send(GetEscrowStatuses).await.is_err() {
        warn!(log, "the directory did not answer before the listener opened";
            "stage" => "directory_unanswered");
    }

    let (listener, nodelay) =
        super::listener::listen(config.listen).map_err(|e| AppError::Bind {
            addr: config.listen,
            reason: e.to_string(),
        })?;
    if let Some(e) = nodelay {
        warn!(log, "TCP_NODELAY not set on the listener"; "error" => %e);
    }
    let addr = listener.local_addr().map_err(|e| AppError::Bind {
        addr: config.listen,
        reason: e.to_string(),
    })?;
    let grace = config.shutdown_grace.as_secs();
    let factory_state = state.clone();
    let server = HttpServer::new(move || build_app(factory_state.clone()))
        .workers(config.workers)
        .keep_alive(SERVER_KEEP_ALIVE)
        .client_request_timeout(super::listener::REQUEST_HEAD_TIMEOUT)
        .shutdown_timeout(grace)
        .disable_signals()
        .listen(listener)
        .map_err(|e| AppError::Bind {
            addr,
            reason: e.to_string(),
        })?
        .run();
    let handle = server.handle();
    let server = actix_web::rt::spawn(server);
    info!(log, "listening"; "stage" => "listening", "addr" => %addr, "workers" => config.workers,
        "signer" => %state.signer);
    Ok(RunningGateway {
        addr,
        url: format!("http://{addr}"),
        directory,
        store,
        poller,
        actors,
        ledger,
        handle,
        server,
        log,
    })
}

fn open_store(target: &StoreTarget, log: &Logger) -> Result<GatewayStore, AppError> {
    GatewayStore::open(target, log.clone()).map_err(|e| AppError::Store {
        path: PathBuf::from(target.describe()),
        reason: e.to_string(),
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Starts the gateway and serves until SIGTERM/SIGINT, then stops gracefully.
pub async fn run(config: Config, log: Logger, registry: Registry) -> Result<(), AppError> {
    let opts = StartOptions {
        registry: Some(registry),
        clock: None,
    };
    start_with(config, log, opts)
        .await?
        .serve_until(shutdown_signal())
        .await
}

/// The whole process for `main`: configuration (file from `config_path`, else `DEVSHARD_CONFIG`,
/// then the environment), logging, metrics, an actix system running [`run`]. Invalid
/// configuration prints one line to stderr and exits with 64.
pub fn serve(config_path: Option<&Path>) -> ExitCode {
    let env = process_env();
    let path = config_path
        .map(Path::to_path_buf)
        .or_else(|| env.get(ENV_CONFIG).map(PathBuf::from));
    let config = match Config::load(path.as_deref(), &env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devshard-gateway: {e}");
            return ExitCode::from(ConfigError::EXIT_CODE);
        }
    };
    let (log, guard) = logging::init(config.log_level);
    let code = match metrics::new_registry() {
        Ok(registry) => {
            let result = actix_web::rt::System::new().block_on(run(config, log.clone(), registry));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    crit!(log, "gateway stopped with an error"; "stage" => "fatal", "error" => %e);
                    eprintln!("devshard-gateway: {e}");
                    ExitCode::from(e.exit_code())
                }
            }
        }
        Err(e) => {
            eprintln!("devshard-gateway: cannot set up metrics: {e}");
            ExitCode::from(EXIT_SOFTWARE)
        }
    };
    drop(log);
    drop(guard);
    code
}
