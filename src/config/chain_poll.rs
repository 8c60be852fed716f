//! `[chain_poll]`: the chain poller's settings (`devshard_actors::chain::ChainPollSettings`,
//! see `docs/chain-polling.md`) as read from the file, with the `DEVSHARD_GATEWAY_*` /
//! `DEVSHARD_POC_REQUEST_MODE` variables layered on top.
//!
//! Precedence of each field: defaults < file < settings an admin changed through
//! `PUT /v1/admin/settings` (persisted, applied at start by the process) < environment. A field
//! set by the environment is *pinned*: the API refuses to change it, so that what runs never
//! differs from what the next start would run. [`ChainPollConfig::pinned`] says which.

use std::collections::BTreeMap;

use devshard_actors::chain::ChainPollSettings;

use super::{
    env::{
        EnvMap, ENV_CHAIN_PHASE_POLL_INTERVAL, ENV_PARTICIPANTS_POLL_INTERVAL,
        ENV_POC_REQUEST_MODE, ENV_PUBLIC_API_REQUESTS_PER_MINUTE, ENV_VERSIONS_POLL_INTERVAL,
    },
    raw::RawConfig,
    ConfigError,
};

/// Each environment variable and the field it sets.
pub const ENV_FIELDS: [(&str, &str); 5] = [
    (
        ENV_CHAIN_PHASE_POLL_INTERVAL,
        "chain_phase_poll_interval_ms",
    ),
    (
        ENV_PARTICIPANTS_POLL_INTERVAL,
        "participants_poll_interval_ms",
    ),
    (ENV_VERSIONS_POLL_INTERVAL, "versions_poll_interval_ms"),
    (
        ENV_PUBLIC_API_REQUESTS_PER_MINUTE,
        "public_api_requests_per_minute",
    ),
    (ENV_POC_REQUEST_MODE, "poc_request_mode"),
];

/// The validated chain poll settings of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChainPollConfig {
    /// File values with the environment applied.
    pub settings: ChainPollSettings,
    /// Field name → the environment variable that set it.
    pub pinned: BTreeMap<String, String>,
}

/// A non-empty, trimmed variable.
fn value<'a>(env: &'a EnvMap, name: &str) -> Option<&'a str> {
    env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// Applies the chain poll variables to `raw.chain_poll` and records which fields they pin.
/// A malformed variable is a [`ConfigError::Env`] naming it; a combination that breaks the
/// request budget is a [`ConfigError::Invalid`] of `chain_poll`.
pub(super) fn apply_env(raw: &mut RawConfig, env: &EnvMap) -> Result<(), ConfigError> {
    let set: Vec<(&'static str, &'static str)> = ENV_FIELDS
        .into_iter()
        .filter(|(name, _)| value(env, name).is_some())
        .collect();
    if set.is_empty() {
        return Ok(());
    }
    let applied = raw
        .chain_poll
        .clone()
        .apply_env(|name| value(env, name).map(str::to_string));
    raw.chain_poll =
        applied.map_err(
            |e| match ENV_FIELDS.iter().find(|(name, _)| e.0.starts_with(name)) {
                Some(&(name, _)) => ConfigError::Env {
                    name,
                    message: e
                        .0
                        .trim_start_matches(name)
                        .trim_start_matches(':')
                        .trim()
                        .into(),
                },
                None => invalid(e.0),
            },
        )?;
    for (name, field) in set {
        raw.chain_poll_env
            .insert(field.to_string(), name.to_string());
    }
    Ok(())
}

fn invalid(message: String) -> ConfigError {
    ConfigError::Invalid {
        key: "chain_poll",
        message,
    }
}

/// Validates the (file + environment) settings.
pub(super) fn validate(raw: &RawConfig) -> Result<ChainPollConfig, ConfigError> {
    raw.chain_poll.validate().map_err(|e| invalid(e.0))?;
    Ok(ChainPollConfig {
        settings: raw.chain_poll.clone(),
        pinned: raw.chain_poll_env.clone(),
    })
}
