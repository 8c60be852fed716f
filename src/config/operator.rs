//! `[shaping]` (what is forced upstream, per model) and `[ledger]` (the durable cost ledger's
//! retention), as read from the file and validated.
//!
//! ```toml
//! [shaping]
//! force_logprobs = true                 # logprobs, top_logprobs = 5, return_token_ids upstream
//! [shaping.models]
//! "Qwen/Qwen3-0.6B" = false             # per-model override
//!
//! [ledger]
//! retention_days = 90                   # 0 = keep forever
//! settle_interval_ms = 2000             # how often nonces are settled from the diff log
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Days of ledger rows kept by default.
pub const DEFAULT_LEDGER_RETENTION_DAYS: u64 = 90;

/// How often the ledger's settlement tail runs by default.
pub const DEFAULT_LEDGER_SETTLE_INTERVAL_MS: u64 = 2_000;

/// `[shaping]` as read from the file (valid as read: nothing to check).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShapingConfig {
    /// Force `logprobs`/`top_logprobs`/`return_token_ids` upstream for every model…
    pub force_logprobs: bool,
    /// … except where a model says otherwise.
    pub models: BTreeMap<String, bool>,
}

impl Default for ShapingConfig {
    fn default() -> Self {
        ShapingConfig {
            force_logprobs: true,
            models: BTreeMap::new(),
        }
    }
}

impl ShapingConfig {
    /// Whether `model`'s requests get the forced fields.
    pub fn forces(&self, model: &str) -> bool {
        self.models
            .get(model)
            .copied()
            .unwrap_or(self.force_logprobs)
    }
}

/// `[ledger]` as read from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// Rows older than this are deleted (hourly); 0 keeps them forever.
    pub retention_days: u64,
    /// How often the settlement tail reads the escrows' new diffs.
    pub settle_interval_ms: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            retention_days: DEFAULT_LEDGER_RETENTION_DAYS,
            settle_interval_ms: DEFAULT_LEDGER_SETTLE_INTERVAL_MS,
        }
    }
}

impl LedgerConfig {
    /// Retention in milliseconds (`None` = forever).
    pub fn retention_ms(&self) -> Option<i64> {
        (self.retention_days > 0).then(|| {
            i64::try_from(self.retention_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX)
        })
    }
}
