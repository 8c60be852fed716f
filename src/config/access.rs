//! Per-model access control (`access_mode`) and the request accounting settings.
//!
//! TOML:
//! ```toml
//! default_access_mode = ""          # "" = auto: api_key when DEVSHARD_API_KEYS is set, else open
//! [model_access]
//! "Qwen/Qwen3-235B" = "admin_only"  # open | api_key | admin_only
//! [accounting]
//! idempotency_window_secs = 600
//! max_requests = 10000
//! max_replay_bytes = 1048576
//! ```
//!
//! Unlike the upstream Go gateway (which makes models without limits `admin_only`), the default
//! never locks a configured model away from API-key holders.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};

use super::{ConfigError, RawConfig};

/// Who may use a model in `POST /v1/chat/completions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessMode {
    /// Anyone (no key needed; a key that is sent must still be valid).
    Open,
    /// A valid API key (`DEVSHARD_API_KEYS`) or the admin key.
    ApiKey,
    /// The admin key only.
    AdminOnly,
}

impl AccessMode {
    /// The TOML spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::Open => "open",
            AccessMode::ApiKey => "api_key",
            AccessMode::AdminOnly => "admin_only",
        }
    }

    fn parse(s: &str) -> Option<AccessMode> {
        match s {
            "open" => Some(AccessMode::Open),
            "api_key" => Some(AccessMode::ApiKey),
            "admin_only" => Some(AccessMode::AdminOnly),
            _ => None,
        }
    }
}

/// Access modes in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessConfig {
    /// Mode of models without an entry in `model_access`.
    pub default_mode: AccessMode,
    /// Per-model overrides.
    pub models: BTreeMap<String, AccessMode>,
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            default_mode: AccessMode::Open,
            models: BTreeMap::new(),
        }
    }
}

impl AccessConfig {
    /// The mode of `model`.
    pub fn mode(&self, model: &str) -> AccessMode {
        self.models.get(model).copied().unwrap_or(self.default_mode)
    }

    /// True when some model may be served without a key.
    pub fn any_open(&self) -> bool {
        self.default_mode == AccessMode::Open
            || self.models.values().any(|m| *m == AccessMode::Open)
    }
}

/// `[accounting]` as read from the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawAccounting {
    pub idempotency_window_secs: u64,
    pub max_requests: usize,
    pub max_replay_bytes: usize,
}

/// Idempotency window (10 min).
pub const DEFAULT_IDEMPOTENCY_WINDOW_SECS: u64 = 600;
/// Requests kept in the in-memory table.
pub const DEFAULT_ACCOUNTING_MAX_REQUESTS: usize = 10_000;
/// Largest stored answer (JSON body or SSE bytes) replayed to a retry (1 MiB).
pub const DEFAULT_MAX_REPLAY_BYTES: usize = 1024 * 1024;

impl Default for RawAccounting {
    fn default() -> Self {
        RawAccounting {
            idempotency_window_secs: DEFAULT_IDEMPOTENCY_WINDOW_SECS,
            max_requests: DEFAULT_ACCOUNTING_MAX_REQUESTS,
            max_replay_bytes: DEFAULT_MAX_REPLAY_BYTES,
        }
    }
}

/// Validated `[accounting]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AccountingConfig {
    #[serde(with = "secs")]
    pub idempotency_window: Duration,
    pub max_requests: usize,
    pub max_replay_bytes: usize,
}

impl Default for AccountingConfig {
    fn default() -> Self {
        AccountingConfig {
            idempotency_window: Duration::from_secs(DEFAULT_IDEMPOTENCY_WINDOW_SECS),
            max_requests: DEFAULT_ACCOUNTING_MAX_REQUESTS,
            max_replay_bytes: DEFAULT_MAX_REPLAY_BYTES,
        }
    }
}

mod secs {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
}

/// Validates `default_access_mode` and `model_access` (`api_keys_set`: `DEVSHARD_API_KEYS`
/// holds at least one key).
pub fn validate_access(raw: &RawConfig, api_keys_set: bool) -> Result<AccessConfig, ConfigError> {
    let default_mode = match raw.default_access_mode.trim() {
        "" | "auto" if api_keys_set => AccessMode::ApiKey,
        "" | "auto" => AccessMode::Open,
        s => AccessMode::parse(s).ok_or_else(|| ConfigError::Invalid {
            key: "default_access_mode",
            message: format!("{s:?} is not one of open, api_key, admin_only (or empty for auto)"),
        })?,
    };
    let mut models = BTreeMap::new();
    for (model, mode) in &raw.model_access {
        let m = AccessMode::parse(mode.trim()).ok_or_else(|| ConfigError::Invalid {
            key: "model_access",
            message: format!("{model:?} = {mode:?}: expected open, api_key or admin_only"),
        })?;
        models.insert(model.clone(), m);
    }
    Ok(AccessConfig {
        default_mode,
        models,
    })
}

/// Validates `[accounting]`.
pub fn validate_accounting(raw: &RawAccounting) -> Result<AccountingConfig, ConfigError> {
    if raw.max_requests == 0 {
        return Err(ConfigError::Invalid {
            key: "accounting.max_requests",
            message: "must be at least 1".into(),
        });
    }
    Ok(AccountingConfig {
        idempotency_window: Duration::from_secs(raw.idempotency_window_secs),
        max_requests: raw.max_requests,
        max_replay_bytes: raw.max_replay_bytes,
    })
}
