//! `[rotation]` of the gateway config and the `rotation` section of `PUT /v1/admin/settings`:
//! per model, how many escrows to keep active, the deposit of each new one and the daily cap.
//! Off by default (no `[[rotation.models]]`, or `enabled = false`).
//!
//! ```toml
//! [rotation]
//! enabled = true
//! check_interval_ms = 30000
//! settled_retention_s = 3600
//! [[rotation.models]]
//! model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
//! target_count = 1
//! amount = 1000000000
//! max_deposit_per_day = 5000000000
//! ```

use serde::{Deserialize, Serialize};

/// Upstream's nonce margin before the serving limit.
pub const DEFAULT_NONCE_MARGIN: u64 = 200;
/// Worst-case requests the balance must still pay for.
pub const DEFAULT_RESERVE_REQUESTS: u64 = 8;
pub const DEFAULT_MARGIN_S: u64 = 60;
/// Escrows a model may keep serving beyond `target_count` when its escrows are short-lived
/// (`super::runway`).
pub const DEFAULT_MAX_SPARES: u32 = 2;
/// The most spares accepted (each holds a deposit).
pub const MAX_SPARES: u32 = 16;
/// Upstream checks every 30 s.
pub const DEFAULT_CHECK_INTERVAL_MS: u64 = 30_000;
/// Back-off of failed creations: first delay, cap.
pub const DEFAULT_BACKOFF_FIRST_MS: u64 = 5_000;
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 300_000;
/// How long a settled escrow of a rotating model stays registered before the rotation removes
/// it (`super::retention`); 0 keeps it registered forever.
pub const DEFAULT_SETTLED_RETENTION_S: u64 = 3_600;
/// The longest retention accepted (a year).
pub const MAX_SETTLED_RETENTION_S: u64 = 365 * 86_400;

/// One model's rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRotation {
    pub model: String,
    /// Escrows kept active (not running low) for the model.
    pub target_count: u32,
    /// Deposit of each new escrow.
    pub amount: u64,
    /// Most deposited for the model per UTC day (creations included before they commit).
    pub max_deposit_per_day: u64,
    /// An escrow runs low within this many nonces of its serving limit.
    #[serde(default = "default_nonce_margin")]
    pub nonce_margin: u64,
    /// An escrow runs low when its balance cannot pay this many worst-case requests.
    #[serde(default = "default_reserve_requests")]
    pub reserve_requests: u64,
    /// An escrow is also low when what it used lately (`burn.rs`) would use up its nonces within
    /// this many seconds (never more than half of them).
    #[serde(default = "default_margin_s")]
    pub margin_s: u64,
    /// At most this many escrows beyond `target_count` serve at once, kept while the serving
    /// escrows would last less than `margin_s` at the model's rate (short-lived escrows: each
    /// holds a deposit; 0 keeps `target_count` alone).
    #[serde(default = "default_max_spares")]
    pub max_spares: u32,
}

fn default_margin_s() -> u64 {
    DEFAULT_MARGIN_S
}

fn default_max_spares() -> u32 {
    DEFAULT_MAX_SPARES
}

fn default_nonce_margin() -> u64 {
    DEFAULT_NONCE_MARGIN
}

fn default_reserve_requests() -> u64 {
    DEFAULT_RESERVE_REQUESTS
}

/// `[rotation]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RotationSettings {
    pub enabled: bool,
    pub check_interval_ms: u64,
    pub backoff_first_ms: u64,
    pub backoff_max_ms: u64,
    /// Seconds a settled escrow of a rotating model stays registered (listed, its actor alive)
    /// after its settlement; then the rotation removes it as `DELETE /v1/admin/escrows/{id}`
    /// would (archive row, diff log and ledger kept). 0: never removed.
    pub settled_retention_s: u64,
    pub models: Vec<ModelRotation>,
}

impl Default for RotationSettings {
    fn default() -> Self {
        RotationSettings {
            enabled: true,
            check_interval_ms: DEFAULT_CHECK_INTERVAL_MS,
            backoff_first_ms: DEFAULT_BACKOFF_FIRST_MS,
            backoff_max_ms: DEFAULT_BACKOFF_MAX_MS,
            settled_retention_s: DEFAULT_SETTLED_RETENTION_S,
            models: Vec::new(),
        }
    }
}

/// One rejected field (`field` is relative to `rotation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationFieldError {
    pub field: String,
    pub message: String,
}

impl RotationSettings {
    /// The rotation of `model`, when it is on.
    pub fn model(&self, model: &str) -> Option<&ModelRotation> {
        self.models
            .iter()
            .find(|m| m.model == model)
            .filter(|_| self.enabled)
    }

    /// True when some model rotates.
    pub fn active(&self) -> bool {
        self.enabled && !self.models.is_empty()
    }

    /// Every problem at once.
    pub fn validate(&self) -> Result<(), Vec<RotationFieldError>> {
        let mut errors = Vec::new();
        let mut err = |field: String, message: &str| {
            errors.push(RotationFieldError {
                field,
                message: message.to_owned(),
            })
        };
        if self.check_interval_ms < 100 {
            err("check_interval_ms".into(), "must be at least 100");
        }
        if self.backoff_first_ms == 0 || self.backoff_max_ms < self.backoff_first_ms {
            err(
                "backoff_first_ms".into(),
                "must be > 0 and not above backoff_max_ms",
            );
        }
        if self.settled_retention_s > MAX_SETTLED_RETENTION_S {
            err(
                "settled_retention_s".into(),
                "must be at most 31536000 (a year); 0 keeps settled escrows registered",
            );
        }
        for (i, m) in self.models.iter().enumerate() {
            let at = |f: &str| format!("models[{i}].{f}");
            if m.model.trim().is_empty() {
                err(at("model"), "must name a model");
            }
            if self.models[..i].iter().any(|o| o.model == m.model) {
                err(at("model"), "is listed twice");
            }
            if m.target_count == 0 {
                err(at("target_count"), "must be at least 1");
            }
            if m.amount == 0 {
                err(at("amount"), "must be > 0");
            }
            if m.max_spares > MAX_SPARES {
                err(at("max_spares"), "must be at most 16");
            }
            if m.max_deposit_per_day < m.amount {
                err(
                    at("max_deposit_per_day"),
                    "must be at least `amount` (or no escrow could ever be created)",
                );
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(amount: u64, cap: u64) -> ModelRotation {
        ModelRotation {
            model: "m".into(),
            target_count: 1,
            amount,
            max_deposit_per_day: cap,
            nonce_margin: 10,
            reserve_requests: 2,
            margin_s: 60,
            max_spares: DEFAULT_MAX_SPARES,
        }
    }

    #[test]
    fn off_by_default_and_every_problem_is_named() {
        let d = RotationSettings::default();
        assert!(!d.active());
        assert!(d.validate().is_ok());
        let bad = RotationSettings {
            models: vec![
                model(10, 5),
                ModelRotation {
                    max_spares: MAX_SPARES + 1,
                    ..model(0, 5)
                },
            ],
            ..RotationSettings::default()
        };
        let fields: Vec<String> = bad
            .validate()
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "models[0].max_deposit_per_day",
                "models[1].model",
                "models[1].amount",
                "models[1].max_spares"
            ]
        );
        let toml: RotationSettings = toml::from_str(
            "[[models]]\nmodel = \"m\"\ntarget_count = 2\namount = 5\nmax_deposit_per_day = 20\n",
        )
        .unwrap();
        assert!(toml.active());
        assert_eq!(toml.model("m").unwrap().nonce_margin, DEFAULT_NONCE_MARGIN);
        assert_eq!(toml.model("m").unwrap().margin_s, DEFAULT_MARGIN_S);
        assert_eq!(toml.model("m").unwrap().max_spares, DEFAULT_MAX_SPARES);
        assert_eq!(toml.settled_retention_s, DEFAULT_SETTLED_RETENTION_S);
        let forever: RotationSettings = toml::from_str("settled_retention_s = 0\n").unwrap();
        assert_eq!(forever.settled_retention_s, 0);
        assert!(forever.validate().is_ok());
        let too_long = RotationSettings {
            settled_retention_s: MAX_SETTLED_RETENTION_S + 1,
            ..RotationSettings::default()
        };
        let fields: Vec<String> = too_long
            .validate()
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["settled_retention_s"]);
    }
}
