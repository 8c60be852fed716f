//! `devshard-gateway sim`: run a simulated network until interrupted.
//!
//! Prints one `name: value` line per fact, then waits for Ctrl-C:
//!
//! ```text
//! escrow_id: 42
//! escrow_ids: 42
//! group: gonka1…,gonka1…            (slot order)
//! gateway_key: <hex private key of the escrow creator>
//! gateway_address: gonka1…
//! chain_api: http://127.0.0.1:PORT
//! control_api: http://127.0.0.1:PORT  (routes under /sim/…)
//! route_prefix: /v1/devshard
//! protocol: v2
//! model: Qwen/…
//! profile: mixed
//! host_0: http://127.0.0.1:PORT
//! …
//! host_0_warm_key: gonka1…          (hosts on warm keys only)
//! ```

use std::{io::Write, net::IpAddr, process::ExitCode};

use clap::Args;

use devshard_actors::{
    clock::TokioClock,
    protocol::{crypto::SigningKey, state::SessionConfig, version::ProtocolVersion},
};

use super::{Profile, SimConfig, SimNetwork, WarmMode};

/// Exit code for a bad command line or config (BSD `EX_USAGE`).
const EX_USAGE: u8 = 64;

/// Options of the `sim` subcommand.
#[derive(Args, Clone, Debug)]
pub struct SimArgs {
    /// Number of hosts.
    #[arg(long, default_value_t = 7)]
    pub hosts: usize,
    /// Latency profile: zero, fast, default or mixed.
    #[arg(long, default_value = "default")]
    pub profile: Profile,
    /// Seed of host keys, jitter and validation sampling.
    #[arg(long, default_value = super::DEFAULT_SEED, env = "DEVSHARD_SIM_SEED")]
    pub seed: String,
    /// Escrow id (repeat for several escrows over the same hosts).
    #[arg(long = "escrow", default_value = "42")]
    pub escrows: Vec<String>,
    /// Escrow amount.
    #[arg(long, default_value_t = 1_000_000_000)]
    pub amount: u64,
    /// Model the hosts serve.
    #[arg(long, default_value = super::DEFAULT_MODEL)]
    pub model: String,
    /// Route prefix of the devshard host API (default: the protocol version's route).
    #[arg(long)]
    pub route_prefix: Option<String>,
    /// Protocol version the hosts run: v2 (route /v1/devshard, tag "v2") or v4.1 (route
    /// /devshard/v4.1, tag "v4.1", settlement drain).
    #[arg(long, default_value = "v2")]
    pub protocol: ProtocolVersion,
    /// Escrow creator key (hex); default derived from the seed.
    #[arg(long, env = "DEVSHARD_SIM_GATEWAY_KEY", hide_env_values = true)]
    pub gateway_key: Option<String>,
    /// Probability that a host validates an inference it did not execute.
    #[arg(long, default_value_t = 0.5)]
    pub validation_rate: f64,
    /// Tokens per answer (capped by the request's max_tokens).
    #[arg(long, default_value_t = 24)]
    pub output_tokens: u32,
    /// Address every server binds.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// Chain API port; host i listens on port+1+i. 0 = ephemeral ports.
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Block time of the simulated chain in milliseconds.
    #[arg(long, default_value_t = 6_000)]
    pub block_time_ms: u64,
    /// Hosts answer 503 requests_disabled to inference work during PoC.
    #[arg(long)]
    pub poc_disables_hosts: bool,
    /// Session refusal timeout in seconds (default 60).
    #[arg(long)]
    pub refusal_timeout: Option<i64>,
    /// Session execution timeout in seconds (default 1200).
    #[arg(long)]
    pub execution_timeout: Option<i64>,
    /// Hosts that sign with a chain-granted warm key: all, none or a count K (hosts 0..K).
    #[arg(long, default_value = "none")]
    pub warm_keys: WarmMode,
}

impl SimArgs {
    /// The library config these options describe.
    pub fn to_config(&self) -> Result<SimConfig, String> {
        let mut cfg = SimConfig::with_seed(&self.seed);
        if let Some(hex) = &self.gateway_key {
            cfg.gateway_key = SigningKey::from_hex(hex).map_err(|e| e.to_string())?;
        }
        cfg.hosts = self.hosts;
        cfg.profile = self.profile.clone();
        cfg.escrow_ids = self.escrows.clone();
        cfg.amount = self.amount;
        cfg.model = self.model.clone();
        cfg.set_protocol(self.protocol);
        if let Some(prefix) = &self.route_prefix {
            cfg.route_prefix = prefix.clone();
        }
        cfg.validation_rate = self.validation_rate;
        cfg.output_tokens = self.output_tokens;
        cfg.bind_ip = self.bind;
        cfg.warm_keys = self.warm_keys;
        cfg.base_port = self.port;
        cfg.epochs.block_time_ms = self.block_time_ms.max(1);
        cfg.epochs.hosts_disable_during_poc = self.poc_disables_hosts;
        if self.refusal_timeout.is_some() || self.execution_timeout.is_some() {
            let mut session = SessionConfig::default_for_group(cfg.slot_map()?.len());
            session.refusal_timeout = self.refusal_timeout.unwrap_or(session.refusal_timeout);
            session.execution_timeout = self.execution_timeout.unwrap_or(session.execution_timeout);
            cfg.session_config = Some(session);
        }
        Ok(cfg)
    }
}

/// The `name: value` facts printed at start.
pub fn describe(net: &SimNetwork) -> Vec<(String, String)> {
    let cfg = net.config();
    let group = net
        .escrow(
            cfg.escrow_ids
                .first()
                .map(String::as_str)
                .unwrap_or_default(),
        )
        .map(|e| {
            e.slots
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut out = vec![
        (
            "escrow_id".to_owned(),
            cfg.escrow_ids.first().cloned().unwrap_or_default(),
        ),
        ("escrow_ids".to_owned(), cfg.escrow_ids.join(",")),
        ("group".to_owned(), group),
        ("gateway_key".to_owned(), cfg.gateway_key.secret_hex()),
        (
            "gateway_address".to_owned(),
            cfg.gateway_key.address().to_string(),
        ),
        ("chain_api".to_owned(), net.chain_url().to_owned()),
        ("control_api".to_owned(), net.control_url().to_owned()),
        ("route_prefix".to_owned(), cfg.route_prefix.clone()),
        ("protocol".to_owned(), cfg.protocol.to_string()),
        ("model".to_owned(), cfg.model.clone()),
        ("profile".to_owned(), cfg.profile.to_string()),
    ];
    out.extend(
        net.hosts()
            .iter()
            .map(|h| (format!("host_{}", h.index), h.url.clone())),
    );
    out.extend(net.hosts().iter().filter_map(|h| {
        let warm = h.warm_key.as_ref()?;
        Some((
            format!("host_{}_warm_key", h.index),
            warm.address().to_string(),
        ))
    }));
    out
}

/// Runs the simulator until Ctrl-C.
pub fn run(args: &SimArgs) -> ExitCode {
    let cfg = match args.to_config() {
        Ok(c) => c,
        Err(e) => return fail(EX_USAGE, &format!("sim: {e}")),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(1, &format!("sim: runtime: {e}")),
    };
    rt.block_on(async move {
        let net = match SimNetwork::start(cfg, TokioClock::new().shared()).await {
            Ok(n) => n,
            Err(e) => return fail(EX_USAGE, &format!("sim: {e}")),
        };
        let mut out = std::io::stdout().lock();
        for (name, value) in describe(&net) {
            let _ = writeln!(out, "{name}: {value}");
        }
        let _ = out.flush();
        drop(out);
        let _ = tokio::signal::ctrl_c().await;
        net.shutdown();
        ExitCode::SUCCESS
    })
}

fn fail(code: u8, message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{message}");
    ExitCode::from(code)
}
