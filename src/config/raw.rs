//! `RawConfig`: the configuration exactly as read from the TOML file, before environment
//! overrides and validation. Every field has a named default (the constants below), and unknown
//! keys are rejected so that a typo never silently falls back to a default.
//!
//! `deploy/config.example.toml` lists every key with its default; a test keeps the two in sync.

use std::{collections::BTreeMap, path::PathBuf};

use devshard_actors::{
    chain::ChainPollSettings,
    escrow::{info::DEFAULT_ROUTE_PREFIX, EscrowConfig},
};
use serde::Deserialize;

use super::secret::Secret;

/// Listen address (upstream listens on `:8080`; we default to loopback for safety).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// HTTP worker threads; `0` means one per available core.
pub const DEFAULT_WORKERS: usize = 0;
/// Directory holding `gateway.db`.
pub const DEFAULT_DATA_DIR: &str = "data";
/// Cosmos REST (grpc-gateway) of a chain node (upstream `DEVSHARD_CHAIN_REST` default).
pub const DEFAULT_CHAIN_REST_URL: &str = "http://localhost:1317";
/// `max_tokens` when a request sets neither `max_tokens` nor `max_completion_tokens`.
pub const DEFAULT_MAX_TOKENS: u64 = 3_072;
/// Largest `max_tokens` a request may ask for.
pub const DEFAULT_MAX_TOKENS_CAP: u64 = 4_096;
/// Largest accepted request body (4 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Races in flight across the process (streams included): the hard ceiling, also of the adaptive
/// limit; beyond it requests get 503 + `Retry-After`.
pub const DEFAULT_MAX_CONCURRENT_RACES: usize = 512;
/// Log level (`trace`, `debug`, `info`, `warning`, `error`, `critical`).
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// How long running requests (open streams included) may finish after SIGTERM/SIGINT.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 30;
/// Timeout of one chain REST or public API call (upstream: 10 s).
pub const DEFAULT_CHAIN_TIMEOUT_MS: u64 = 10_000;
/// Chain nonce limit of an escrow when the chain does not report one.
pub const DEFAULT_MAX_NONCE: u64 = 20_000;

/// Attempts (nonces) one request may use.
pub const DEFAULT_RACE_MAX_ATTEMPTS: usize = 3;
/// An attempt without a receipt by then is abandoned.
pub const DEFAULT_RACE_RECEIPT_TIMEOUT_MS: u64 = 30_000;
/// No chunk for this long after the receipt: the attempt stalled.
pub const DEFAULT_RACE_STALL_TIMEOUT_MS: u64 = 60_000;
/// Hard cap on one attempt (20 min).
pub const DEFAULT_RACE_ATTEMPT_TIMEOUT_MS: u64 = 1_200_000;
/// After the client left, the winner's stream is drained this long for its finish marker.
pub const DEFAULT_RACE_META_DRAIN_MS: u64 = 30_000;

/// Connect + response headers of an inference POST to a host.
pub const DEFAULT_HOST_INFERENCE_HEADERS_MS: u64 = 60_000;
/// Catch-up diffs and GET queries to a host.
pub const DEFAULT_HOST_QUERY_MS: u64 = 30_000;
/// `verify-timeout` calls to a host.
pub const DEFAULT_HOST_VERIFY_TIMEOUT_MS: u64 = 180_000;

/// Restarts an entity actor may use within the window before it is marked failed.
pub const DEFAULT_SUPERVISOR_MAX_RESTARTS: usize = 5;
/// Window of the restart budget.
pub const DEFAULT_SUPERVISOR_WINDOW_MS: i64 = 60_000;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default = "default_listen")]
    pub listen: String,
    #[serde(default = "default_workers")]
    pub workers: usize,
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// File holding the hex private key (the key itself is only accepted from the environment).
    #[serde(default)]
    pub private_key_file: Option<PathBuf>,
    /// Not read from the file (secrets belong in the environment); set by `DEVSHARD_PRIVATE_KEY`.
    #[serde(skip)]
    pub private_key: Option<Secret>,
    /// Set by `DEVSHARD_ADMIN_API_KEY` only.
    #[serde(skip)]
    pub admin_api_key: Option<Secret>,
    /// Set by `DEVSHARD_API_KEYS` only.
    #[serde(skip)]
    pub api_keys: Vec<Secret>,
    #[serde(default = "default_chain_rest_url")]
    pub chain_rest_url: String,
    #[serde(default)]
    pub public_api_url: String,
    #[serde(default = "default_route_prefix")]
    pub route_prefix: String,
    /// Protocol version of escrows registered without one (`v2`, `v4.1`); empty = the one
    /// `route_prefix` names, else v2.
    #[serde(default)]
    pub protocol: String,
    /// PEM file of extra trusted CA certificates for every outgoing TLS call (hosts, chain REST,
    /// public API), added to the bundled web PKI roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Model of requests without `model` when several are served, and of escrows whose model
    /// the chain does not tell. Empty = none.
    #[serde(default)]
    pub default_model: String,
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
    #[serde(default = "default_max_tokens_cap")]
    pub max_tokens_cap: u64,
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    #[serde(default = "default_max_concurrent_races")]
    pub max_concurrent_races: usize,
    #[serde(default = "default_log_level")]
    pub log_level: String,
    #[serde(default)]
    pub debug_fault_injection: bool,
    #[serde(default = "default_shutdown_grace_secs")]
    pub shutdown_grace_secs: u64,
    #[serde(default = "default_chain_timeout_ms")]
    pub chain_timeout_ms: u64,
    #[serde(default = "default_max_nonce")]
    pub max_nonce: u64,
    /// Escrow ids registered at start (when not registered yet).
    #[serde(default)]
    pub escrows: Vec<String>,
    #[serde(default)]
    pub race: RawRace,
    #[serde(default)]
    pub settlement: devshard_actors::settlement::machine::SettlementSettings,
    /// `[rotation]`: escrows created and rotated per model (off without models).
    #[serde(default)]
    pub rotation: crate::rotation::settings::RotationSettings,
    #[serde(default)]
    pub escrow: EscrowConfig,
    #[serde(default)]
    pub host: RawHost,
    #[serde(default)]
    pub supervisor: RawSupervisor,
    /// `[chain_poll]`: the chain poller (defaults of `ChainPollSettings`).
    #[serde(default)]
    pub chain_poll: ChainPollSettings,
    /// Not read from the file: field of `chain_poll` → the environment variable that set it.
    #[serde(skip)]
    pub chain_poll_env: BTreeMap<String, String>,
    /// Access mode of models without a `model_access` entry; empty = auto (see `access`).
    #[serde(default)]
    pub default_access_mode: String,
    /// `[model_access]`: model → `open` | `api_key` | `admin_only`.
    #[serde(default)]
    pub model_access: BTreeMap<String, String>,
    /// `[accounting]`: request table and idempotent retries.
    #[serde(default)]
    pub accounting: super::access::RawAccounting,
    /// `[shaping]`: fields forced upstream, per model.
    #[serde(default)]
    pub shaping: super::operator::ShapingConfig,
    /// `[ledger]`: retention of the cost ledger.
    #[serde(default)]
    pub ledger: super::operator::LedgerConfig,
    /// `[overload]`: the adaptive concurrency limit and its queue.
    #[serde(default)]
    pub overload: crate::overload::settings::OverloadSettings,
    /// `[store]`: SQLite (default) or a PostgreSQL URL.
    #[serde(default)]
    pub store: super::store::RawStore,
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            listen: default_listen(),
            workers: default_workers(),
            data_dir: default_data_dir(),
            store: super::store::RawStore::default(),
            private_key_file: None,
            private_key: None,
            admin_api_key: None,
            api_keys: Vec::new(),
            chain_rest_url: default_chain_rest_url(),
            public_api_url: String::new(),
            route_prefix: default_route_prefix(),
            protocol: String::new(),
            ca_file: None,
            default_model: String::new(),
            default_max_tokens: default_max_tokens(),
            max_tokens_cap: default_max_tokens_cap(),
            max_body_bytes: default_max_body_bytes(),
            max_concurrent_races: default_max_concurrent_races(),
            log_level: default_log_level(),
            debug_fault_injection: false,
            shutdown_grace_secs: default_shutdown_grace_secs(),
            chain_timeout_ms: default_chain_timeout_ms(),
            max_nonce: default_max_nonce(),
            escrows: Vec::new(),
            race: RawRace::default(),
            settlement: Default::default(),
            rotation: Default::default(),
            escrow: EscrowConfig::default(),
            host: RawHost::default(),
            supervisor: RawSupervisor::default(),
            chain_poll: ChainPollSettings::default(),
            chain_poll_env: BTreeMap::new(),
            default_access_mode: String::new(),
            model_access: BTreeMap::new(),
            accounting: super::access::RawAccounting::default(),
            shaping: super::operator::ShapingConfig::default(),
            ledger: super::operator::LedgerConfig::default(),
            overload: crate::overload::settings::OverloadSettings::default(),
        }
    }
}

/// `[race]`: limits of one request's race.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRace {
    pub max_attempts: usize,
    pub receipt_timeout_ms: u64,
    pub stall_timeout_ms: u64,
    pub attempt_timeout_ms: u64,
    pub meta_drain_ms: u64,
    /// Longest SSE line read from a host (bytes, `\n` included; default 16 MiB).
    pub sse_max_line_bytes: usize,
}

impl Default for RawRace {
    fn default() -> Self {
        RawRace {
            max_attempts: DEFAULT_RACE_MAX_ATTEMPTS,
            receipt_timeout_ms: DEFAULT_RACE_RECEIPT_TIMEOUT_MS,
            stall_timeout_ms: DEFAULT_RACE_STALL_TIMEOUT_MS,
            attempt_timeout_ms: DEFAULT_RACE_ATTEMPT_TIMEOUT_MS,
            meta_drain_ms: DEFAULT_RACE_META_DRAIN_MS,
            sse_max_line_bytes: devshard_actors::protocol::sse::DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// `[host]`: timeouts of calls to devshard hosts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawHost {
    pub inference_headers_ms: u64,
    pub query_ms: u64,
    pub verify_timeout_ms: u64,
}

impl Default for RawHost {
    fn default() -> Self {
        RawHost {
            inference_headers_ms: DEFAULT_HOST_INFERENCE_HEADERS_MS,
            query_ms: DEFAULT_HOST_QUERY_MS,
            verify_timeout_ms: DEFAULT_HOST_VERIFY_TIMEOUT_MS,
        }
    }
}

/// `[supervisor]`: restart budget of escrow and participant actors.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawSupervisor {
    pub max_restarts: usize,
    pub window_ms: i64,
}

impl Default for RawSupervisor {
    fn default() -> Self {
        RawSupervisor {
            max_restarts: DEFAULT_SUPERVISOR_MAX_RESTARTS,
            window_ms: DEFAULT_SUPERVISOR_WINDOW_MS,
        }
    }
}

fn default_listen() -> String {
    DEFAULT_LISTEN.to_string()
}
fn default_workers() -> usize {
    DEFAULT_WORKERS
}
fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}
fn default_chain_rest_url() -> String {
    DEFAULT_CHAIN_REST_URL.to_string()
}
fn default_route_prefix() -> String {
    DEFAULT_ROUTE_PREFIX.to_string()
}
fn default_max_tokens() -> u64 {
    DEFAULT_MAX_TOKENS
}
fn default_max_tokens_cap() -> u64 {
    DEFAULT_MAX_TOKENS_CAP
}
fn default_max_body_bytes() -> usize {
    DEFAULT_MAX_BODY_BYTES
}
fn default_max_concurrent_races() -> usize {
    DEFAULT_MAX_CONCURRENT_RACES
}
fn default_log_level() -> String {
    DEFAULT_LOG_LEVEL.to_string()
}
fn default_shutdown_grace_secs() -> u64 {
    DEFAULT_SHUTDOWN_GRACE_SECS
}
fn default_chain_timeout_ms() -> u64 {
    DEFAULT_CHAIN_TIMEOUT_MS
}
fn default_max_nonce() -> u64 {
    DEFAULT_MAX_NONCE
}
