//! Every health, perf, hedging and repair knob of docs/health.md, with its default, plus the chain
//! poller's intervals (docs/health.md §7). Operators change them at runtime (`PUT /v1/admin/settings`,
//! persisted); a changed value is checked with [`HealthSettings::validate`] before it is used.
//!
//! Durations are `i64` milliseconds so that they combine with the `now_ms: i64` every policy
//! function takes; thresholds compared with time-decayed counts are `f64`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One rejected setting: which field, and a sentence saying what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingError {
    pub field: &'static str,
    /// E.g. `eject_strikes must be ≥ 1.0 (got 0.5)`.
    pub message: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Health, perf, hedging and repair settings (docs/health.md §1–§6). Unknown fields are rejected;
/// missing fields take their default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthSettings {
    /// §1 correlation guard: same fault signature from ≥ 2 hosts within this window is shared.
    pub shared_fault_window_ms: i64,
    /// §1 relative evidence: a peer success this recent allows an ejection.
    pub peer_evidence_window_ms: i64,
    /// §2 each strike's weight halves every this many ms.
    pub strike_half_life_ms: i64,
    /// §2 decayed strike weight that ejects.
    pub eject_strikes: f64,
    /// §2 first ejection; doubles per level.
    pub base_ejection_ms: i64,
    /// §2 cap of one ejection (before jitter).
    pub max_ejection_ms: i64,
    /// §2 the level falls by one per this much time spent Healthy.
    pub level_decay_ms: i64,
    /// §2 floor: fraction of an escrow's distinct participants that must stay routable.
    pub min_routable_fraction: f64,
    /// §2 finished, verified attempts that end probation.
    pub probation_successes: u32,
    /// §2 probation ends by time after this long.
    pub probation_max_ms: i64,
    /// §2 liveness rule: hold of a Suspect/Probation winner while a Healthy attempt runs.
    pub suspect_hold_ms: i64,
    /// §3 half-life of every perf estimate.
    pub perf_half_life_ms: i64,
    /// §3 Beta prior: pseudo-successes added to the success rate.
    pub perf_prior_successes: f64,
    /// §3 decayed samples needed before a host can be Unresponsive.
    pub min_samples_for_decision: u32,
    /// §3 decayed failures needed before a host can be Unresponsive.
    pub min_failures_for_unresponsive: u32,
    /// §3 decayed success rate below which a host is Unresponsive.
    pub unresponsive_threshold: f64,
    /// §4 attempts per request (primary + failure-driven + hedges).
    pub max_attempts: u32,
    /// §4 floor of the receipt hedge trigger.
    pub receipt_timeout_floor_ms: i64,
    /// §4 receipt hedge trigger without data.
    pub receipt_timeout_ms: i64,
    /// §4 floor of the first-token hedge trigger.
    pub first_token_floor_ms: i64,
    /// §4 hedge tokens earned per request.
    pub hedge_budget: f64,
    /// §4 hedge bucket capacity.
    pub hedge_burst: f64,
    /// §4 how long unsuitable upcoming nonces are offered to other requests before a hedge skips them.
    pub hedge_target_wait_ms: i64,
    /// §4 upcoming nonces a hedge may pass over (each costs the per-nonce fee).
    pub hedge_max_skip_nonces: u32,
    /// §6 a repair loop stops trying after this long.
    pub repair_give_up_ms: i64,
    /// §2 ± fraction of jitter on ejection durations.
    pub ejection_jitter: f64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            shared_fault_window_ms: 30_000,
            peer_evidence_window_ms: 300_000,
            strike_half_life_ms: 120_000,
            eject_strikes: 3.0,
            base_ejection_ms: 30_000,
            max_ejection_ms: 1_800_000,
            level_decay_ms: 600_000,
            min_routable_fraction: 0.5,
            probation_successes: 2,
            probation_max_ms: 900_000,
            suspect_hold_ms: 500,
            perf_half_life_ms: 600_000,
            perf_prior_successes: 2.0,
            min_samples_for_decision: 5,
            min_failures_for_unresponsive: 2,
            unresponsive_threshold: 0.8,
            max_attempts: 3,
            receipt_timeout_floor_ms: 1_500,
            receipt_timeout_ms: 5_000,
            first_token_floor_ms: 1_000,
            hedge_budget: 0.05,
            hedge_burst: 10.0,
            hedge_target_wait_ms: 200,
            hedge_max_skip_nonces: 2,
            repair_give_up_ms: 3_600_000,
            ejection_jitter: 0.2,
        }
    }
}

/// Collects errors; every check names its field and states the rule in its message.
#[derive(Default)]
struct Checker(Vec<SettingError>);

impl Checker {
    fn fail(&mut self, field: &'static str, rule: &str, got: impl fmt::Display) {
        self.0.push(SettingError {
            field,
            message: format!("{field} must be {rule} (got {got})"),
        });
    }

    /// A whole number that must be at least 1.
    fn count(&mut self, field: &'static str, v: u32) {
        if v < 1 {
            self.fail(field, "≥ 1", v);
        }
    }

    /// A duration that must be strictly positive.
    fn positive_ms(&mut self, field: &'static str, v: i64) {
        if v <= 0 {
            self.fail(field, "> 0 ms", v);
        }
    }

    /// A duration that may be zero.
    fn non_negative_ms(&mut self, field: &'static str, v: i64) {
        if v < 0 {
            self.fail(field, "≥ 0 ms", v);
        }
    }

    /// `v ≥ min` and finite (NaN fails every comparison, so it is rejected here too).
    fn at_least(&mut self, field: &'static str, v: f64, min: f64) {
        if !(v >= min && v.is_finite()) {
            self.fail(field, &format!("≥ {min:.1}"), v);
        }
    }

    /// `v ∈ [lo, hi]`.
    fn within(&mut self, field: &'static str, v: f64, lo: f64, hi: f64) {
        if !(lo..=hi).contains(&v) {
            self.fail(field, &format!("in [{lo}, {hi}]"), v);
        }
    }
}

impl HealthSettings {
    /// Checks every field; returns all problems at once.
    pub fn validate(&self) -> Result<(), Vec<SettingError>> {
        let mut c = Checker::default();
        c.positive_ms("shared_fault_window_ms", self.shared_fault_window_ms);
        c.positive_ms("peer_evidence_window_ms", self.peer_evidence_window_ms);
        c.positive_ms("strike_half_life_ms", self.strike_half_life_ms);
        c.at_least("eject_strikes", self.eject_strikes, 1.0);
        c.positive_ms("base_ejection_ms", self.base_ejection_ms);
        c.positive_ms("max_ejection_ms", self.max_ejection_ms);
        if self.max_ejection_ms < self.base_ejection_ms {
            c.fail(
                "max_ejection_ms",
                &format!("≥ base_ejection_ms ({})", self.base_ejection_ms),
                self.max_ejection_ms,
            );
        }
        c.positive_ms("level_decay_ms", self.level_decay_ms);
        c.within(
            "min_routable_fraction",
            self.min_routable_fraction,
            0.0,
            1.0,
        );
        c.count("probation_successes", self.probation_successes);
        c.positive_ms("probation_max_ms", self.probation_max_ms);
        c.non_negative_ms("suspect_hold_ms", self.suspect_hold_ms);
        c.positive_ms("perf_half_life_ms", self.perf_half_life_ms);
        c.at_least("perf_prior_successes", self.perf_prior_successes, 0.0);
        c.count("min_samples_for_decision", self.min_samples_for_decision);
        c.count(
            "min_failures_for_unresponsive",
            self.min_failures_for_unresponsive,
        );
        c.within(
            "unresponsive_threshold",
            self.unresponsive_threshold,
            0.0,
            1.0,
        );
        c.count("max_attempts", self.max_attempts);
        c.positive_ms("receipt_timeout_floor_ms", self.receipt_timeout_floor_ms);
        c.positive_ms("receipt_timeout_ms", self.receipt_timeout_ms);
        if self.receipt_timeout_ms < self.receipt_timeout_floor_ms {
            c.fail(
                "receipt_timeout_ms",
                &format!(
                    "≥ receipt_timeout_floor_ms ({})",
                    self.receipt_timeout_floor_ms
                ),
                self.receipt_timeout_ms,
            );
        }
        c.positive_ms("first_token_floor_ms", self.first_token_floor_ms);
        c.within("hedge_budget", self.hedge_budget, 0.0, 1.0);
        c.at_least("hedge_burst", self.hedge_burst, 0.0);
        c.non_negative_ms("hedge_target_wait_ms", self.hedge_target_wait_ms);
        c.positive_ms("repair_give_up_ms", self.repair_give_up_ms);
        if !(0.0..1.0).contains(&self.ejection_jitter) {
            c.fail("ejection_jitter", "in [0, 1)", self.ejection_jitter);
        }
        if c.0.is_empty() {
            Ok(())
        } else {
            Err(c.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip() {
        let s = HealthSettings::default();
        assert_eq!(s.validate(), Ok(()));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<HealthSettings>(json).unwrap(), s);
    }

    #[test]
    fn partial_input_takes_defaults_and_unknown_fields_are_rejected() {
        let s: HealthSettings = serde_json::from_str(r#"{"eject_strikes": 4}"#).unwrap();
        assert_eq!(s.eject_strikes, 4.0);
        assert_eq!(s.base_ejection_ms, 30_000);
        assert!(serde_json::from_str::<HealthSettings>(r#"{"eject_strike": 4}"#).is_err());
    }

    #[test]
    fn messages_name_the_rule() {
        let s = HealthSettings {
            eject_strikes: 0.5,
            hedge_budget: 1.5,
            max_ejection_ms: 10,
            unresponsive_threshold: f64::NAN,
            min_failures_for_unresponsive: 0,
            ..HealthSettings::default()
        };
        let errors = s.validate().unwrap_err();
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(text.contains(&"eject_strikes must be ≥ 1.0 (got 0.5)".to_string()));
        assert!(text.contains(&"hedge_budget must be in [0, 1] (got 1.5)".to_string()));
        assert!(text
            .iter()
            .any(|t| t.starts_with("max_ejection_ms must be ≥ base_ejection_ms (30000)")));
        assert!(errors.iter().any(|e| e.field == "unresponsive_threshold"));
        assert!(text.contains(&"min_failures_for_unresponsive must be ≥ 1 (got 0)".to_string()));
        assert_eq!(errors.len(), 5);
    }
}
