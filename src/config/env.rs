//! Environment overrides. Every setting the environment can change has a `DEVSHARD_*` name here
//! (plus the upstream `devshardctl` name as an alias where the concept is the same, so operators
//! of the Go gateway feel at home). The environment wins over the file; an empty value counts as
//! unset. The environment is passed in as a map ([`EnvMap`]) so tests never touch the process
//! environment; [`process_env`] reads the real one once, in the binary.

use std::{collections::BTreeMap, path::PathBuf, str::FromStr};

pub use devshard_actors::chain::settings::{
    ENV_CHAIN_PHASE_POLL_INTERVAL, ENV_PARTICIPANTS_POLL_INTERVAL, ENV_POC_REQUEST_MODE,
    ENV_PUBLIC_API_REQUESTS_PER_MINUTE, ENV_VERSIONS_POLL_INTERVAL,
};

use super::{chain_poll, raw::RawConfig, secret::Secret, ConfigError};

/// A snapshot of the environment (name → value).
pub type EnvMap = BTreeMap<String, String>;

pub const ENV_LISTEN: &str = "DEVSHARD_LISTEN";
/// Upstream name: port only; keeps the host part of `listen`.
pub const ENV_PORT: &str = "DEVSHARD_PORT";
pub const ENV_WORKERS: &str = "DEVSHARD_WORKERS";
pub const ENV_DATA_DIR: &str = "DEVSHARD_DATA_DIR";
/// Upstream alias of [`ENV_DATA_DIR`].
pub const ENV_STORAGE_DIR: &str = "DEVSHARD_STORAGE_DIR";
pub const ENV_PRIVATE_KEY: &str = "DEVSHARD_PRIVATE_KEY";
pub const ENV_PRIVATE_KEY_FILE: &str = "DEVSHARD_PRIVATE_KEY_FILE";
pub const ENV_ADMIN_API_KEY: &str = "DEVSHARD_ADMIN_API_KEY";
pub const ENV_API_KEYS: &str = "DEVSHARD_API_KEYS";
pub const ENV_CHAIN_REST_URL: &str = "DEVSHARD_CHAIN_REST_URL";
/// Upstream alias of [`ENV_CHAIN_REST_URL`].
pub const ENV_CHAIN_REST: &str = "DEVSHARD_CHAIN_REST";
pub const ENV_PUBLIC_API_URL: &str = "DEVSHARD_PUBLIC_API_URL";
/// Upstream alias of [`ENV_PUBLIC_API_URL`].
pub const ENV_PUBLIC_API: &str = "DEVSHARD_PUBLIC_API";
pub const ENV_ROUTE_PREFIX: &str = "DEVSHARD_ROUTE_PREFIX";
/// `protocol`: protocol version of escrows registered without one.
pub const ENV_PROTOCOL: &str = "DEVSHARD_PROTOCOL";
/// `ca_file`: extra trusted CA certificates (PEM) for outgoing TLS.
pub const ENV_CA_FILE: &str = "DEVSHARD_CA_FILE";
/// Upstream name of `default_model`.
pub const ENV_MODEL: &str = "DEVSHARD_MODEL";
pub const ENV_DEFAULT_MAX_TOKENS: &str = "DEVSHARD_DEFAULT_MAX_TOKENS";
/// Upstream alias of [`ENV_DEFAULT_MAX_TOKENS`].
pub const ENV_GATEWAY_DEFAULT_MAX_TOKENS: &str = "GATEWAY_DEFAULT_MAX_TOKENS";
pub const ENV_MAX_TOKENS_CAP: &str = "DEVSHARD_MAX_TOKENS_CAP";
/// Upstream alias of [`ENV_MAX_TOKENS_CAP`].
pub const ENV_GATEWAY_MAX_TOKENS_CAP: &str = "GATEWAY_MAX_TOKENS_CAP";
pub const ENV_MAX_BODY_BYTES: &str = "DEVSHARD_MAX_BODY_BYTES";
pub const ENV_MAX_CONCURRENT_RACES: &str = "DEVSHARD_MAX_CONCURRENT_RACES";
/// Upstream alias of [`ENV_MAX_CONCURRENT_RACES`].
pub const ENV_GATEWAY_MAX_CONCURRENT_REQUESTS: &str = "GATEWAY_MAX_CONCURRENT_REQUESTS";
pub const ENV_LOG_LEVEL: &str = "DEVSHARD_LOG_LEVEL";
pub const ENV_DEBUG_FAULT_INJECTION: &str = "DEVSHARD_DEBUG_FAULT_INJECTION";
pub const ENV_SHUTDOWN_GRACE_SECONDS: &str = "DEVSHARD_SHUTDOWN_GRACE_SECONDS";
/// Comma-separated escrow ids to register at start (replaces `escrows` of the file).
pub const ENV_ESCROWS: &str = "DEVSHARD_ESCROWS";
/// Upstream single-escrow name; appended to the list.
pub const ENV_ESCROW_ID: &str = "DEVSHARD_ESCROW_ID";
/// Upstream name of `race.meta_drain_ms`, in seconds.
pub const ENV_META_DRAIN_TIMEOUT_SECONDS: &str = "DEVSHARD_META_DRAIN_TIMEOUT_SECONDS";
/// `store.url`: a `postgres://` URL selects the PostgreSQL store.
pub const ENV_DATABASE_URL: &str = "DEVSHARD_DATABASE_URL";
/// `store.sslmode`: libpq's `sslmode` when the URL names none.
pub const ENV_DATABASE_SSLMODE: &str = "DEVSHARD_DATABASE_SSLMODE";
/// `store.sslrootcert`: the database server's CA file (PEM) or `system`.
pub const ENV_DATABASE_SSLROOTCERT: &str = "DEVSHARD_DATABASE_SSLROOTCERT";
/// `store.replica_id` (default: `HOSTNAME`).
pub const ENV_REPLICA_ID: &str = "DEVSHARD_REPLICA_ID";
/// `store.lease_ttl_ms`.
pub const ENV_LEASE_TTL_MS: &str = "DEVSHARD_LEASE_TTL_MS";
/// `store.advertise_url`: where the other replicas reach this one.
pub const ENV_ADVERTISE_URL: &str = "DEVSHARD_ADVERTISE_URL";
/// The host (pod) name: the default replica id.
const ENV_HOSTNAME: &str = "HOSTNAME";

// Chain polling (`[chain_poll]`, see `chain_poll.rs`): the five names re-exported above.

/// Prefixes of the variables [`process_env`] keeps.
const ENV_PREFIXES: [&str; 2] = ["DEVSHARD_", "GATEWAY_"];

/// The process environment, restricted to our prefixes.
pub fn process_env() -> EnvMap {
    std::env::vars()
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)) || k == ENV_HOSTNAME)
        .collect()
}

/// The first non-empty variable among `names` (primary name first, then aliases).
fn lookup<'a>(env: &'a EnvMap, names: &[&'static str]) -> Option<(&'static str, &'a str)> {
    names.iter().find_map(|n| {
        env.get(*n)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(|v| (*n, v))
    })
}

fn parse<T: FromStr>(name: &'static str, value: &str, expected: &str) -> Result<T, ConfigError> {
    value.parse().map_err(|_| ConfigError::Env {
        name,
        message: format!("{value:?} is not {expected}"),
    })
}

/// Upstream boolean spelling: `1/true/yes/on` and `0/false/no/off` (anything else is an error).
fn parse_bool(name: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::Env {
            name,
            message: format!("{value:?} is not a boolean (1/true/yes/on or 0/false/no/off)"),
        }),
    }
}

fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Applies the environment on top of the file's values.
pub fn apply(raw: &mut RawConfig, env: &EnvMap) -> Result<(), ConfigError> {
    if let Some((_, v)) = lookup(env, &[ENV_LISTEN]) {
        raw.listen = v.to_string();
    } else if let Some((name, v)) = lookup(env, &[ENV_PORT]) {
        let port: u16 = parse(name, v, "a TCP port")?;
        let host = raw
            .listen
            .rsplit_once(':')
            .map_or("0.0.0.0", |(h, _)| h)
            .to_string();
        raw.listen = format!("{host}:{port}");
    }
    if let Some((name, v)) = lookup(env, &[ENV_WORKERS]) {
        raw.workers = parse(name, v, "a number of threads")?;
    }
    if let Some((_, v)) = lookup(env, &[ENV_DATA_DIR, ENV_STORAGE_DIR]) {
        raw.data_dir = PathBuf::from(v);
    }
    apply_secrets(raw, env)?;
    if let Some((_, v)) = lookup(env, &[ENV_DATABASE_URL]) {
        raw.store.url = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_DATABASE_SSLMODE]) {
        raw.store.sslmode = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_DATABASE_SSLROOTCERT]) {
        raw.store.sslrootcert = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_REPLICA_ID]) {
        raw.store.replica_id = v.to_string();
    } else if let Some((_, v)) =
        lookup(env, &[ENV_HOSTNAME]).filter(|_| raw.store.replica_id.is_empty())
    {
        raw.store.replica_id = v.to_string();
    }
    if let Some((name, v)) = lookup(env, &[ENV_LEASE_TTL_MS]) {
        raw.store.lease_ttl_ms = parse(name, v, "milliseconds")?;
    }
    if let Some((_, v)) = lookup(env, &[ENV_ADVERTISE_URL]) {
        raw.store.advertise_url = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_CHAIN_REST_URL, ENV_CHAIN_REST]) {
        raw.chain_rest_url = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_PUBLIC_API_URL, ENV_PUBLIC_API]) {
        raw.public_api_url = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_ROUTE_PREFIX]) {
        raw.route_prefix = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_PROTOCOL]) {
        raw.protocol = v.to_string();
    }
    if let Some((_, v)) = lookup(env, &[ENV_CA_FILE]) {
        raw.ca_file = Some(PathBuf::from(v));
    }
    if let Some((_, v)) = lookup(env, &[ENV_MODEL]) {
        raw.default_model = v.to_string();
    }
    if let Some((n, v)) = lookup(
        env,
        &[ENV_DEFAULT_MAX_TOKENS, ENV_GATEWAY_DEFAULT_MAX_TOKENS],
    ) {
        raw.default_max_tokens = parse(n, v, "a positive integer")?;
    }
    if let Some((n, v)) = lookup(env, &[ENV_MAX_TOKENS_CAP, ENV_GATEWAY_MAX_TOKENS_CAP]) {
        raw.max_tokens_cap = parse(n, v, "a positive integer")?;
    }
    if let Some((n, v)) = lookup(env, &[ENV_MAX_BODY_BYTES]) {
        raw.max_body_bytes = parse(n, v, "a number of bytes")?;
    }
    let races = [
        ENV_MAX_CONCURRENT_RACES,
        ENV_GATEWAY_MAX_CONCURRENT_REQUESTS,
    ];
    if let Some((n, v)) = lookup(env, &races) {
        raw.max_concurrent_races = parse(n, v, "a positive integer")?;
    }
    if let Some((_, v)) = lookup(env, &[ENV_LOG_LEVEL]) {
        raw.log_level = v.to_string();
    }
    if let Some((n, v)) = lookup(env, &[ENV_DEBUG_FAULT_INJECTION]) {
        raw.debug_fault_injection = parse_bool(n, v)?;
    }
    if let Some((n, v)) = lookup(env, &[ENV_SHUTDOWN_GRACE_SECONDS]) {
        raw.shutdown_grace_secs = parse(n, v, "a number of seconds")?;
    }
    if let Some((n, v)) = lookup(env, &[ENV_META_DRAIN_TIMEOUT_SECONDS]) {
        let secs: u64 = parse(n, v, "a number of seconds")?;
        raw.race.meta_drain_ms = secs.saturating_mul(1_000);
    }
    if let Some((_, v)) = lookup(env, &[ENV_ESCROWS]) {
        raw.escrows = split_list(v);
    }
    if let Some((_, v)) = lookup(env, &[ENV_ESCROW_ID]) {
        if !raw.escrows.iter().any(|e| e == v) {
            raw.escrows.push(v.to_string());
        }
    }
    chain_poll::apply_env(raw, env)
}

/// Private key, admin key and API keys: environment only (the key may also come from a file).
fn apply_secrets(raw: &mut RawConfig, env: &EnvMap) -> Result<(), ConfigError> {
    let key = lookup(env, &[ENV_PRIVATE_KEY]);
    let key_file = lookup(env, &[ENV_PRIVATE_KEY_FILE]);
    match (key, key_file) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Env {
                name: ENV_PRIVATE_KEY,
                message: format!(
                    "set either {ENV_PRIVATE_KEY} or {ENV_PRIVATE_KEY_FILE}, not both"
                ),
            })
        }
        (Some((_, v)), None) => {
            raw.private_key = Some(Secret::new(v));
            raw.private_key_file = None;
        }
        (None, Some((_, v))) => raw.private_key_file = Some(PathBuf::from(v)),
        (None, None) => {}
    }
    if let Some((_, v)) = lookup(env, &[ENV_ADMIN_API_KEY]) {
        raw.admin_api_key = Some(Secret::new(v));
    }
    if let Some((_, v)) = lookup(env, &[ENV_API_KEYS]) {
        raw.api_keys = split_list(v).into_iter().map(Secret::new).collect();
    }
    Ok(())
}
