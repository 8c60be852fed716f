//! Configuration: a TOML file ([`RawConfig`]), then environment overrides ([`env`](mod@env)), then
//! validation into [`Config`], the only form the rest of the process sees.
//!
//! Precedence: environment > file > built-in defaults (named constants in [`raw`]); for the
//! runtime settings of `[chain_poll]`, changes persisted by `PUT /v1/admin/settings` sit between
//! the file and the environment ([`chain_poll`]). Invalid
//! configuration is a [`ConfigError`] with a precise message naming the setting; the binary exits
//! with [`ConfigError::EXIT_CODE`] (64, `EX_USAGE`). Secrets (private key, admin key, API keys)
//! are accepted from the environment only (the private key also from a file) and are wrapped so
//! that they never appear in `Debug` output, logs or responses.

pub mod access;
pub mod chain_poll;
pub mod env;
pub mod operator;
pub mod raw;
pub mod secret;
pub mod store;
mod validate;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use devshard_actors::{
    directory::RestartBudget,
    escrow::EscrowConfig,
    protocol::{crypto::SigningKey, version::ProtocolVersion},
    race::RaceLimits,
};

pub use access::{AccessConfig, AccessMode, AccountingConfig};
pub use chain_poll::ChainPollConfig;
pub use env::{process_env, EnvMap};
pub use raw::RawConfig;
pub use secret::Secret;

/// Environment variable naming the config file when the command line gives none.
pub const ENV_CONFIG: &str = "DEVSHARD_CONFIG";

/// Why the configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("invalid config file {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("invalid {name}: {message}")]
    Env { name: &'static str, message: String },
    #[error("invalid setting `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
    #[error(
        "no signing key: set {} or {} (or `private_key_file` in the config file)",
        env::ENV_PRIVATE_KEY,
        env::ENV_PRIVATE_KEY_FILE
    )]
    MissingKey,
    #[error("cannot read the private key file {path}: {reason}")]
    KeyFile { path: PathBuf, reason: String },
    #[error("invalid private key (from {origin}): {reason}")]
    Key { origin: String, reason: String },
}

impl ConfigError {
    /// Process exit code for invalid configuration (`EX_USAGE`).
    pub const EXIT_CODE: u8 = 64;
}

/// Where the gateway finds the chain and how it talks to hosts of registered escrows.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainSettings {
    /// Cosmos REST base URL (no trailing slash).
    pub rest_url: String,
    /// Public API base URL (no trailing slash); used to learn an escrow's model when the chain
    /// escrow record does not carry one.
    pub public_api_url: Option<String>,
    /// Timeout of one chain call.
    pub timeout: Duration,
    /// Host route prefix stored in each escrow's registration: a prefix that names a protocol
    /// version (`/v1/devshard`, `/devshard/<name>`) is replaced by the escrow's version's route;
    /// any other (a proxy path) is used as is.
    pub route_prefix: String,
    /// `protocol`: the version of escrows registered without one (`None`: the one
    /// `route_prefix` names, else v2).
    pub protocol: Option<ProtocolVersion>,
    /// Model of escrows whose model neither the chain nor the public API tells.
    pub default_model: Option<String>,
    /// Nonce limit of escrows when the chain does not report one.
    pub max_nonce: u64,
}

impl ChainSettings {
    /// The version of an escrow registered with `requested` (the registration call's), else
    /// `protocol`, else the one `route_prefix` names, else v2.
    pub fn protocol_for(&self, requested: Option<ProtocolVersion>) -> ProtocolVersion {
        requested
            .or(self.protocol)
            .or_else(|| {
                ProtocolVersion::from_route_prefix(&self.route_prefix)
                    .ok()
                    .flatten()
            })
            .unwrap_or_default()
    }

    /// The host route of an escrow on `version`: the version's own route, unless `route_prefix`
    /// is a path that names no version (a proxy in front of the hosts), used as is.
    pub fn route_for(&self, version: ProtocolVersion) -> String {
        match ProtocolVersion::from_route_prefix(&self.route_prefix) {
            Ok(None) => self.route_prefix.clone(),
            _ => version.route_prefix(),
        }
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// HTTP worker threads (resolved: never 0).
    pub workers: usize,
    pub data_dir: PathBuf,
    /// The operator's signing key (`Debug` prints only its address).
    pub key: Arc<SigningKey>,
    /// Admin bearer key; `None` switches the admin surface off (404).
    pub admin_api_key: Option<Secret>,
    /// Bearer keys for `/v1/chat/completions` and `/v1/models`; empty = open.
    pub api_keys: Vec<Secret>,
    pub chain: ChainSettings,
    /// Model of requests without `model` when several models are served.
    pub default_model: Option<String>,
    pub default_max_tokens: u64,
    pub max_tokens_cap: u64,
    pub max_body_bytes: usize,
    pub max_concurrent_races: usize,
    pub log_level: slog::Level,
    /// `DirectoryDeps.fault_injection` (`InjectPanic` hooks).
    pub fault_injection: bool,
    pub shutdown_grace: Duration,
    /// Escrow ids registered at start when not registered yet.
    pub escrows: Vec<String>,
    pub race: RaceLimits,
    pub escrow: EscrowConfig,
    /// `[settlement]`: auto-settle, fee, gas, denom.
    pub settlement: devshard_actors::settlement::machine::SettlementSettings,
    /// `[rotation]`: escrows created and rotated per model.
    pub rotation: crate::rotation::settings::RotationSettings,
    pub budget: RestartBudget,
    /// `[chain_poll]` with the environment applied (persisted admin changes come at start).
    pub chain_poll: ChainPollConfig,
    /// Per-model access modes (`default_access_mode`, `[model_access]`).
    pub access: AccessConfig,
    /// `[accounting]`: request table and idempotent retries.
    pub accounting: AccountingConfig,
    /// `ca_file`: extra trusted CA certificates (PEM) for every outgoing TLS call.
    pub ca_file: Option<PathBuf>,
    /// `[shaping]`: fields forced upstream, per model.
    pub shaping: operator::ShapingConfig,
    /// `[ledger]`: retention of the cost ledger.
    pub ledger: operator::LedgerConfig,
    /// `[overload]`: the adaptive concurrency limit under `max_concurrent_races`.
    pub overload: crate::overload::settings::OverloadSettings,
    /// `[store]`: SQLite in `data_dir` (default) or PostgreSQL.
    pub store: crate::store::StoreTarget,
}

impl Config {
    /// Reads the file (if any), applies the environment and validates.
    pub fn load(path: Option<&Path>, env: &EnvMap) -> Result<Config, ConfigError> {
        let mut raw = match path {
            Some(p) => RawConfig::from_file(p)?,
            None => RawConfig::default(),
        };
        env::apply(&mut raw, env)?;
        Config::from_raw(raw)
    }

    /// Validates a raw configuration (environment already applied).
    pub fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        validate::validate(raw)
    }
}

impl RawConfig {
    /// Parses TOML text (`origin` names the source in errors).
    pub fn from_toml_str(text: &str, origin: &Path) -> Result<RawConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            reason: e.to_string().trim_end().to_string(),
        })
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        RawConfig::from_toml_str(&text, path)
    }
}
