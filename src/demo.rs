//! `devshard-gateway demo`: the simulated devshard network and the gateway in one process.
//!
//! Starts the simulator (hosts, chain API, control API) on loopback, then the real gateway with
//! the simulator's escrows registered (two by default, over the same hosts, so escrow choice is
//! exercised), prints where everything is and ready-to-paste `curl` commands, and serves until
//! interrupted. It honours the same config file and environment as `serve` (listen address,
//! admin key, data directory, …); only what must come from the simulator — the signing key, the
//! chain URLs and the escrow ids — is filled in when not given; without an admin key it makes a
//! throwaway one and prints the live page's URL with it (`debug: …/debug/ui#key=…`). The banner
//! goes to stderr one line per write, so a log line on stdout can only land between its lines.

use std::{io::Write, path::PathBuf, process::ExitCode};

use clap::Args;
use devshard_actors::{clock::TokioClock, protocol::version::ProtocolVersion};

use crate::{
    app::{self, StartOptions},
    config::{
        env::{self, process_env},
        Config, ConfigError, EnvMap,
    },
    logging, metrics,
    rotation::settings::{ModelRotation, RotationSettings},
    sim::{Profile, SimConfig, SimNetwork, WarmMode, DEFAULT_SEED},
};

/// Options of `demo`.
#[derive(Args, Clone, Debug)]
pub struct DemoArgs {
    /// Gateway config file (same as `serve`); `DEVSHARD_CONFIG` works too.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Number of simulated hosts.
    #[arg(long, default_value_t = 7)]
    pub hosts: usize,
    /// Latency profile of the hosts: zero, fast, default or mixed.
    #[arg(long, default_value = "default")]
    pub profile: Profile,
    /// Seed of host keys, jitter and validation sampling.
    #[arg(long, default_value = DEFAULT_SEED)]
    pub seed: String,
    /// Escrows to create on the simulated chain and register (repeat the flag).
    #[arg(long = "escrow", default_values_t = ["42".to_string(), "43".to_string()])]
    pub escrows: Vec<String>,
    /// Tokens per simulated answer.
    #[arg(long, default_value_t = 24)]
    pub output_tokens: u32,
    /// Protocol version of the hosts and the escrows: v2 (route /v1/devshard) or v4.1 (route
    /// /devshard/v4.1); both sides hash its name into every root.
    #[arg(long, default_value = "v2")]
    pub protocol: ProtocolVersion,
    /// Hosts that sign with a chain-granted warm key: all, none or a count K (hosts 0..K);
    /// default about half of them, so both kinds of key are always exercised.
    #[arg(long)]
    pub warm_keys: Option<WarmMode>,
    /// Rotate escrows: the chain's `max_nonce` becomes small (`--max-nonce`) and the gateway
    /// keeps as many escrows active as `--escrow` names, creating each replacement on the
    /// simulated chain before the old one runs out and settling the old one.
    #[arg(long)]
    pub rotation: bool,
    /// The chain's `max_nonce` with `--rotation` (each escrow then lasts about 30 s at four
    /// concurrent streams with the default profile).
    #[arg(long, default_value_t = ROTATION_MAX_NONCE)]
    pub max_nonce: u64,
}

/// `max_nonce` of `demo --rotation`.
pub const ROTATION_MAX_NONCE: u64 = 100;
/// Nonces before the serving limit at which `demo --rotation` creates the replacement.
pub const ROTATION_NONCE_MARGIN: u64 = 24;
/// Deposits a day `demo --rotation` allows, in escrow amounts.
pub const ROTATION_DAILY_ESCROWS: u64 = 100;

/// The rotation `demo --rotation` runs: every escrow's model, as many active as were given,
/// each replacement funded like the simulator's escrows, checked every second.
pub fn rotation_settings(args: &DemoArgs, sim: &SimConfig) -> RotationSettings {
    RotationSettings {
        enabled: true,
        check_interval_ms: 1_000,
        models: vec![ModelRotation {
            model: sim.model.clone(),
            target_count: u32::try_from(args.escrows.len().max(1)).unwrap_or(1),
            amount: sim.amount,
            max_deposit_per_day: sim.amount.saturating_mul(ROTATION_DAILY_ESCROWS),
            nonce_margin: ROTATION_NONCE_MARGIN,
            reserve_requests: crate::rotation::settings::DEFAULT_RESERVE_REQUESTS,
            margin_s: crate::rotation::settings::DEFAULT_MARGIN_S,
            max_spares: crate::rotation::settings::DEFAULT_MAX_SPARES,
        }],
        ..RotationSettings::default()
    }
}

/// The simulator a demo runs.
pub fn sim_config(args: &DemoArgs) -> SimConfig {
    let mut cfg = SimConfig::with_seed(&args.seed);
    cfg.hosts = args.hosts;
    cfg.profile = args.profile.clone();
    cfg.escrow_ids = args.escrows.clone();
    cfg.output_tokens = args.output_tokens;
    cfg.set_protocol(args.protocol);
    cfg.warm_keys = args
        .warm_keys
        .unwrap_or_else(|| WarmMode::mixed(args.hosts));
    if args.rotation {
        cfg.max_nonce = args.max_nonce;
    }
    cfg
}

/// Fills in what must come from the simulator (key, chain URLs, escrows, model, protocol) where
/// `environment` does not set it already.
pub fn fill_environment(args: &DemoArgs, sim: &SimNetwork, environment: &mut EnvMap) {
    let mut fill = |name: &str, value: String| {
        environment.entry(name.to_string()).or_insert(value);
    };
    fill(env::ENV_PRIVATE_KEY, sim.gateway_key().secret_hex());
    fill(env::ENV_CHAIN_REST_URL, sim.chain_url().to_string());
    fill(env::ENV_PUBLIC_API_URL, sim.chain_url().to_string());
    fill(env::ENV_ESCROWS, args.escrows.join(","));
    fill(env::ENV_MODEL, sim.config().model.clone());
    fill(env::ENV_PROTOCOL, args.protocol.to_string());
    fill(env::ENV_ROUTE_PREFIX, sim.config().route_prefix.clone());
}

/// Runs the demo until Ctrl-C / SIGTERM.
pub fn run(args: &DemoArgs) -> ExitCode {
    let system = actix_web::rt::System::new();
    system.block_on(demo(args.clone()))
}

async fn demo(args: DemoArgs) -> ExitCode {
    let cfg = sim_config(&args);
    let model = cfg.model.clone();
    let clock = TokioClock::new().shared();
    let sim = match SimNetwork::start(cfg, clock.clone()).await {
        Ok(s) => s,
        Err(e) => return fail(ConfigError::EXIT_CODE, &format!("demo: simulator: {e}")),
    };
    let mut environment = process_env();
    fill_environment(&args, &sim, &mut environment);
    // The live page needs the admin key: without one given, the demo makes one and prints the
    // page's URL with it (a local demo's throwaway key).
    let generated_admin = (!environment.contains_key(env::ENV_ADMIN_API_KEY)).then(|| {
        let key: [u8; 16] = rand::random();
        hex::encode(key)
    });
    let mut fill = |name: &str, value: String| {
        environment.entry(name.to_string()).or_insert(value);
    };
    if let Some(k) = &generated_admin {
        fill(env::ENV_ADMIN_API_KEY, k.clone());
    }
    let data_dir = std::env::temp_dir().join(format!("devshard-demo-{}", std::process::id()));
    environment
        .entry(env::ENV_DATA_DIR.to_string())
        .or_insert_with(|| data_dir.display().to_string());
    let path = args.config.clone().or_else(|| {
        environment
            .get(crate::config::ENV_CONFIG)
            .map(PathBuf::from)
    });
    let mut config = match Config::load(path.as_deref(), &environment) {
        Ok(c) => c,
        Err(e) => return fail(ConfigError::EXIT_CODE, &format!("demo: {e}")),
    };
    if args.rotation && !config.rotation.active() {
        config.rotation = rotation_settings(&args, sim.config());
    }
    let rotation = config.rotation.active().then(|| {
        let m = config.rotation.models.first();
        format!(
            "on (max_nonce {}, target {}, deposit {}, cap {}/day): GET /v1/admin/rotation",
            sim.config().max_nonce,
            m.map_or(0, |m| m.target_count),
            m.map_or(0, |m| m.amount),
            m.map_or(0, |m| m.max_deposit_per_day)
        )
    });
    let admin = config.admin_api_key.is_some();
    let (log, _guard) = logging::init(config.log_level);
    let registry = match metrics::new_registry() {
        Ok(r) => r,
        Err(e) => return fail(70, &format!("demo: metrics: {e}")),
    };
    let opts = StartOptions {
        registry: Some(registry),
        clock: Some(clock),
    };
    let gateway = match app::start_with(config, log, opts).await {
        Ok(g) => g,
        Err(e) => return fail(70, &format!("demo: {e}")),
    };
    let url = gateway.url.clone();
    let mut lines = vec![
        ("gateway".to_string(), url.clone()),
        (
            "simulator_control".to_string(),
            format!("{}/sim/hosts", sim.control_url()),
        ),
        ("chain_api".to_string(), sim.chain_url().to_string()),
        ("escrows".to_string(), args.escrows.join(",")),
        ("protocol".to_string(), args.protocol.to_string()),
        ("model".to_string(), model.clone()),
        ("data_dir".to_string(), data_dir.display().to_string()),
        ("metrics".to_string(), format!("{url}/metrics")),
    ];
    if let Some(r) = rotation {
        lines.push(("rotation".to_string(), r));
    }
    match (&generated_admin, admin) {
        (Some(key), _) => {
            lines.push(("debug".to_string(), format!("{url}/debug/ui#key={key}")));
            lines.push(("admin_key".to_string(), key.clone()));
        }
        (None, true) => lines.push((
            "debug".to_string(),
            format!("{url}/debug/ui (type $DEVSHARD_ADMIN_API_KEY, or append #key=…)"),
        )),
        (None, false) => {}
    }
    let body = |stream: bool| {
        format!(
            r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"Say hello"}}]}}"#
        )
    };
    lines.push((
        "curl_stream".to_string(),
        format!(
            "curl -N {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{}'",
            body(true)
        ),
    ));
    lines.push((
        "curl".to_string(),
        format!(
            "curl {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{}'",
            body(false)
        ),
    ));
    if admin {
        let first = sim.config().escrow_ids.first().cloned().unwrap_or_default();
        // The generated key is printed as is; an operator's own key stays in its variable.
        let key = generated_admin
            .clone()
            .unwrap_or_else(|| "$DEVSHARD_ADMIN_API_KEY".to_string());
        lines.push((
            "settle".to_string(),
            format!(
                "curl -X POST -H \"Authorization: Bearer {key}\" {url}/v1/admin/escrows/{first}/settle && curl -H \"Authorization: Bearer {key}\" {url}/v1/admin/escrows/{first}/settlement"
            ),
        ));
    }
    lines.push((
        "inject_fault".to_string(),
        format!(
            "curl -X PUT {}/sim/hosts/1/faults -d '{{\"refuse_connections\":true}}'",
            sim.control_url()
        ),
    ));
    // One write per line (see `logging`): a log line can only land between banner lines.
    let mut out = std::io::stderr();
    for (name, value) in lines {
        let _ = logging::write_line(&mut out, &format!("{name}: {value}"));
    }
    let result = gateway.serve_until(shutdown_signal()).await;
    sim.shutdown();
    let _ = std::fs::remove_dir_all(&data_dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(70, &format!("demo: {e}")),
    }
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn fail(code: u8, message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{message}");
    ExitCode::from(code)
}
