//! Settings of chain polling (docs/health.md §7): intervals, the per-host request budget, back-off and
//! the PoC request mode. Layered by the caller: defaults < config file (serde) < environment
//! ([`ChainPollSettings::apply_env`]) < `PUT /v1/admin/settings` ([`ApplyPollSettings`]).
//!
//! [`ChainPollSettings::validate`] rejects any combination whose worst-case request rate to one
//! host (every interval at its shortest jittered length) exceeds the budget, so the budget is
//! never the thing that silently slows polls down under a valid configuration.
//!
//! [`ApplyPollSettings`]: super::messages::ApplyPollSettings

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// `epochs/latest` interval (env, duration such as `20s`).
pub const ENV_CHAIN_PHASE_POLL_INTERVAL: &str = "DEVSHARD_GATEWAY_CHAIN_PHASE_POLL_INTERVAL";
/// `epochs/current/participants` interval.
pub const ENV_PARTICIPANTS_POLL_INTERVAL: &str = "DEVSHARD_GATEWAY_PARTICIPANTS_POLL_INTERVAL";
/// Each miner's `/v1/versions` interval.
pub const ENV_VERSIONS_POLL_INTERVAL: &str = "DEVSHARD_GATEWAY_VERSIONS_POLL_INTERVAL";
/// Request budget per API host (integer, requests per minute).
pub const ENV_PUBLIC_API_REQUESTS_PER_MINUTE: &str =
    "DEVSHARD_GATEWAY_PUBLIC_API_REQUESTS_PER_MINUTE";
/// `off` or `relaxed` (the reference gateway's name).
pub const ENV_POC_REQUEST_MODE: &str = "DEVSHARD_POC_REQUEST_MODE";

/// A snapshot is stale once it is older than this many of its intervals.
pub const STALE_AFTER_INTERVALS: u64 = 5;
/// Shortest interval accepted (the budget check is what really bounds the rate).
pub const MIN_INTERVAL_MS: u64 = 100;
/// Longest interval accepted.
pub const MAX_INTERVAL_MS: u64 = 86_400_000;
/// Largest budget accepted (far above any public proxy; for operators who exempted the routes).
pub const MAX_REQUESTS_PER_MINUTE: u32 = 600;

/// What new requests get during PoC and confirmation PoC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PocMode {
    /// Refused with 503 and `Retry-After` until the expected end of the phase.
    #[default]
    Off,
    /// Served by the participants the chain preserves for the model.
    Relaxed,
}

impl FromStr for PocMode {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<PocMode, SettingsError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(PocMode::Off),
            "relaxed" => Ok(PocMode::Relaxed),
            other => Err(SettingsError(format!(
                "poc_request_mode must be `off` or `relaxed`, not `{other}`"
            ))),
        }
    }
}

impl fmt::Display for PocMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PocMode::Off => "off",
            PocMode::Relaxed => "relaxed",
        })
    }
}

/// Why a chain-polling setting was rejected (the message is meant for the operator).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

fn default_phase_ms() -> u64 {
    20_000
}
fn default_participants_ms() -> u64 {
    60_000
}
fn default_versions_ms() -> u64 {
    300_000
}
fn default_budget() -> u32 {
    6
}
fn default_jitter() -> u32 {
    10
}
fn default_backoff_initial_ms() -> u64 {
    30_000
}
fn default_backoff_max_ms() -> u64 {
    600_000
}
fn default_timeout_ms() -> u64 {
    10_000
}

/// Chain polling settings (names as in docs/health.md §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainPollSettings {
    /// `GET /v1/epochs/latest` every this many ms.
    #[serde(default = "default_phase_ms")]
    pub chain_phase_poll_interval_ms: u64,
    /// `GET /v1/epochs/current/participants` every this many ms, and on every epoch change.
    #[serde(default = "default_participants_ms")]
    pub participants_poll_interval_ms: u64,
    /// Each miner's `GET /v1/versions` every this many ms.
    #[serde(default = "default_versions_ms")]
    pub versions_poll_interval_ms: u64,
    /// Requests per minute to any one host, summed over every poller (a hard cap).
    #[serde(default = "default_budget")]
    pub public_api_requests_per_minute: u32,
    /// Each interval is drawn uniformly within ± this percentage.
    #[serde(default = "default_jitter")]
    pub poll_jitter_percent: u32,
    /// First back-off after a 429/503 without `Retry-After`; doubles per consecutive one.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Cap of the exponential back-off.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Timeout of one poll request.
    #[serde(default = "default_timeout_ms")]
    pub poll_timeout_ms: u64,
    /// What new requests get during PoC phases.
    pub poc_request_mode: PocMode,
}

impl Default for ChainPollSettings {
    fn default() -> Self {
        ChainPollSettings {
            chain_phase_poll_interval_ms: default_phase_ms(),
            participants_poll_interval_ms: default_participants_ms(),
            versions_poll_interval_ms: default_versions_ms(),
            public_api_requests_per_minute: default_budget(),
            poll_jitter_percent: default_jitter(),
            backoff_initial_ms: default_backoff_initial_ms(),
            backoff_max_ms: default_backoff_max_ms(),
            poll_timeout_ms: default_timeout_ms(),
            poc_request_mode: PocMode::Off,
        }
    }
}

impl ChainPollSettings {
    /// Defaults overridden by the environment.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        ChainPollSettings::default().apply_env(lookup)
    }

    /// `self` overridden by whichever of the `ENV_*` variables are set, then validated.
    pub fn apply_env(
        mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let duration = |name: &str| -> Result<Option<u64>, SettingsError> {
            lookup(name)
                .map(|v| parse_duration_ms(&v).map_err(|e| SettingsError(format!("{name}: {e}"))))
                .transpose()
        };
        if let Some(ms) = duration(ENV_CHAIN_PHASE_POLL_INTERVAL)? {
            self.chain_phase_poll_interval_ms = ms;
        }
        if let Some(ms) = duration(ENV_PARTICIPANTS_POLL_INTERVAL)? {
            self.participants_poll_interval_ms = ms;
        }
        if let Some(ms) = duration(ENV_VERSIONS_POLL_INTERVAL)? {
            self.versions_poll_interval_ms = ms;
        }
        if let Some(v) = lookup(ENV_PUBLIC_API_REQUESTS_PER_MINUTE) {
            self.public_api_requests_per_minute = v.trim().parse().map_err(|_| {
                SettingsError(format!(
                    "{ENV_PUBLIC_API_REQUESTS_PER_MINUTE}: `{v}` is not a whole number"
                ))
            })?;
        }
        if let Some(v) = lookup(ENV_POC_REQUEST_MODE) {
            self.poc_request_mode = v.parse().map_err(|e: SettingsError| {
                SettingsError(format!("{ENV_POC_REQUEST_MODE}: {e}"))
            })?;
        }
        self.validate()?;
        Ok(self)
    }

    /// `snapshot_stale_after_ms` of `epochs/latest`.
    pub fn phase_stale_after_ms(&self) -> u64 {
        self.chain_phase_poll_interval_ms
            .saturating_mul(STALE_AFTER_INTERVALS)
    }

    /// `snapshot_stale_after_ms` of the participants list.
    pub fn participants_stale_after_ms(&self) -> u64 {
        self.participants_poll_interval_ms
            .saturating_mul(STALE_AFTER_INTERVALS)
    }

    /// `snapshot_stale_after_ms` of a miner's versions.
    pub fn versions_stale_after_ms(&self) -> u64 {
        self.versions_poll_interval_ms
            .saturating_mul(STALE_AFTER_INTERVALS)
    }

    /// Worst-case requests per minute one interval causes (shortest jittered gap).
    fn rate_per_minute(&self, interval_ms: u64) -> f64 {
        let shortest = interval_ms as f64 * (1.0 - f64::from(self.poll_jitter_percent) / 100.0);
        60_000.0 / shortest.max(1.0)
    }

    /// Worst-case requests per minute to the public API host: epochs, participants, and the
    /// versions of a miner that runs on the same host (a node used as public API usually is one).
    pub fn public_api_demand_per_minute(&self) -> f64 {
        self.rate_per_minute(self.chain_phase_poll_interval_ms)
            + self.rate_per_minute(self.participants_poll_interval_ms)
            + self.rate_per_minute(self.versions_poll_interval_ms)
    }

    /// Checks ranges and that no host's worst-case demand exceeds the budget.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (name, v) in [
            (
                "chain_phase_poll_interval_ms",
                self.chain_phase_poll_interval_ms,
            ),
            (
                "participants_poll_interval_ms",
                self.participants_poll_interval_ms,
            ),
            ("versions_poll_interval_ms", self.versions_poll_interval_ms),
        ] {
            if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&v) {
                return Err(SettingsError(format!(
                    "{name} must be within {MIN_INTERVAL_MS}..={MAX_INTERVAL_MS} ms, not {v}"
                )));
            }
        }
        let budget = self.public_api_requests_per_minute;
        if !(1..=MAX_REQUESTS_PER_MINUTE).contains(&budget) {
            return Err(SettingsError(format!(
                "public_api_requests_per_minute must be within 1..={MAX_REQUESTS_PER_MINUTE}, \
                 not {budget}"
            )));
        }
        if self.poll_jitter_percent > 50 {
            return Err(SettingsError(format!(
                "poll_jitter_percent must be within 0..=50, not {}",
                self.poll_jitter_percent
            )));
        }
        if !(1_000..=self.backoff_max_ms).contains(&self.backoff_initial_ms)
            || self.backoff_max_ms > 86_400_000
        {
            return Err(SettingsError(format!(
                "need 1000 <= backoff_initial_ms ({}) <= backoff_max_ms ({}) <= 86400000",
                self.backoff_initial_ms, self.backoff_max_ms
            )));
        }
        if !(100..=120_000).contains(&self.poll_timeout_ms) {
            return Err(SettingsError(format!(
                "poll_timeout_ms must be within 100..=120000, not {}",
                self.poll_timeout_ms
            )));
        }
        let demand = self.public_api_demand_per_minute();
        if demand > f64::from(budget) + 1e-9 {
            let j = self.poll_jitter_percent;
            return Err(SettingsError(format!(
                "these intervals need up to {demand:.2} requests/min to the public API host \
                 (epochs/latest {:.2}/min + participants {:.2}/min + a co-hosted miner's versions \
                 {:.2}/min, each interval shortened by its -{j}% jitter), but \
                 public_api_requests_per_minute is {budget}: lengthen the intervals or raise the \
                 budget (the public proxy allows 10 requests/min per client IP)",
                self.rate_per_minute(self.chain_phase_poll_interval_ms),
                self.rate_per_minute(self.participants_poll_interval_ms),
                self.rate_per_minute(self.versions_poll_interval_ms),
            )));
        }
        Ok(())
    }
}

/// Parses a Go-style duration (`20s`, `1m30s`, `500ms`, `1.5h`, `0`) into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("`{text}` is not a duration such as 20s, 1m30s or 500ms"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-6,
            "us" | "µs" => 1e-3,
            "ms" => 1.0,
            "s" => 1_000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            "" => return Err(format!("`{text}`: missing unit (ms, s, m or h), e.g. 20s")),
            other => return Err(format!("`{text}`: unknown unit `{other}`")),
        };
        total += value * scale;
        rest = next;
    }
    if !total.is_finite() || total > 1e15 {
        return Err(format!("`{text}` is too long"));
    }
    Ok(total.round() as u64)
}
