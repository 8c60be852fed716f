//! `RawConfig` → `Config`: every check with a message that names the setting and says what is
//! wrong, so that an operator can fix it from the one line the process prints before exiting.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use devshard_actors::{
    directory::RestartBudget,
    host::client::HostTimeouts,
    protocol::{crypto::SigningKey, version::ProtocolVersion},
    race::RaceLimits,
};

use super::{chain_poll, env, raw::RawConfig, ChainSettings, Config, ConfigError, Secret};

/// Shortest allowed body limit: anything smaller cannot hold a useful chat request.
const MIN_BODY_BYTES: usize = 1_024;

fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}

fn positive_ms(key: &'static str, ms: u64) -> Result<Duration, ConfigError> {
    if ms == 0 {
        return Err(invalid(key, "must be greater than 0"));
    }
    Ok(Duration::from_millis(ms))
}

/// Smallest accepted `race.sse_max_line_bytes`: a receipt line must always fit.
const MIN_SSE_LINE_BYTES: usize = 64 * 1024;

fn sse_line_limit(bytes: usize) -> Result<usize, ConfigError> {
    if bytes < MIN_SSE_LINE_BYTES {
        return Err(invalid(
            "race.sse_max_line_bytes",
            format!("{bytes} is below the minimum of {MIN_SSE_LINE_BYTES} bytes"),
        ));
    }
    Ok(bytes)
}

/// `http(s)://host[:port][/path]` without a trailing slash (TLS through rustls, `ca_file`).
fn http_url(key: &'static str, url: &str) -> Result<String, ConfigError> {
    let u = url.trim().trim_end_matches('/');
    match u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
    {
        Some(rest) if !rest.is_empty() => Ok(u.to_string()),
        _ => Err(invalid(
            key,
            format!("{u:?} is not an http:// or https:// URL"),
        )),
    }
}

/// Level names accepted by `log_level` (slog's, plus `warn`).
pub fn parse_level(s: &str) -> Option<slog::Level> {
    match s.trim().to_ascii_lowercase().as_str() {
        "trace" => Some(slog::Level::Trace),
        "debug" => Some(slog::Level::Debug),
        "info" => Some(slog::Level::Info),
        "warn" | "warning" => Some(slog::Level::Warning),
        "error" => Some(slog::Level::Error),
        "critical" | "crit" => Some(slog::Level::Critical),
        _ => None,
    }
}

fn signing_key(raw: &RawConfig) -> Result<SigningKey, ConfigError> {
    let (text, origin) = match (&raw.private_key, &raw.private_key_file) {
        (Some(k), _) if !k.is_blank() => (k.clone(), env::ENV_PRIVATE_KEY.to_string()),
        (_, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::KeyFile {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            (Secret::new(text), format!("file {}", path.display()))
        }
        _ => return Err(ConfigError::MissingKey),
    };
    // `from_hex` errors never echo the input, so the message is safe to print.
    SigningKey::from_hex(text.expose()).map_err(|e| ConfigError::Key {
        origin,
        reason: e.to_string(),
    })
}

fn escrow_ids(ids: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        let id = id.trim();
        if id.is_empty() || id.parse::<u64>().is_err() {
            return Err(invalid(
                "escrows",
                format!("{id:?} is not an escrow id (a decimal number such as \"42\")"),
            ));
        }
        if out.iter().any(|e| e == id) {
            return Err(invalid("escrows", format!("escrow {id} is listed twice")));
        }
        out.push(id.to_string());
    }
    Ok(out)
}

fn non_empty(s: &str) -> Option<String> {
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Checks everything and builds the [`Config`].
pub(super) fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let listen: SocketAddr = raw.listen.trim().parse().map_err(|_| {
        invalid(
            "listen",
            format!(
                "{:?} is not an ip:port address (e.g. 0.0.0.0:8080)",
                raw.listen
            ),
        )
    })?;
    let workers = match raw.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    if raw.data_dir.as_os_str().is_empty() {
        return Err(invalid("data_dir", "must not be empty"));
    }
    let key = signing_key(&raw)?;
    if raw.max_tokens_cap == 0 {
        return Err(invalid("max_tokens_cap", "must be greater than 0"));
    }
    if raw.default_max_tokens == 0 || raw.default_max_tokens > raw.max_tokens_cap {
        return Err(invalid(
            "default_max_tokens",
            format!(
                "{} must be between 1 and max_tokens_cap ({})",
                raw.default_max_tokens, raw.max_tokens_cap
            ),
        ));
    }
    if raw.max_body_bytes < MIN_BODY_BYTES {
        return Err(invalid(
            "max_body_bytes",
            format!(
                "{} is below the minimum of {MIN_BODY_BYTES} bytes",
                raw.max_body_bytes
            ),
        ));
    }
    if raw.max_concurrent_races == 0 {
        return Err(invalid("max_concurrent_races", "must be greater than 0"));
    }
    if let Some((field, why)) = raw.overload.invalid() {
        return Err(invalid(field, why));
    }
    let log_level = parse_level(&raw.log_level).ok_or_else(|| {
        invalid(
            "log_level",
            format!(
                "{:?} is not one of trace, debug, info, warning, error, critical",
                raw.log_level
            ),
        )
    })?;
    let prefix = raw.route_prefix.trim();
    if !prefix.starts_with('/') || (prefix.len() > 1 && prefix.ends_with('/')) {
        return Err(invalid(
            "route_prefix",
            format!("{prefix:?} must start with '/' and not end with '/' (e.g. /v1/devshard)"),
        ));
    }
    let protocol = protocol_setting(&raw.protocol, prefix)?;
    if raw.max_nonce == 0 {
        return Err(invalid("max_nonce", "must be greater than 0"));
    }
    if raw.race.max_attempts == 0 {
        return Err(invalid("race.max_attempts", "must be at least 1"));
    }
    if raw.supervisor.window_ms <= 0 {
        return Err(invalid("supervisor.window_ms", "must be greater than 0"));
    }
    let public_api_url = match non_empty(&raw.public_api_url) {
        Some(u) => Some(http_url("public_api_url", &u)?),
        None => None,
    };
    let default_model = non_empty(&raw.default_model);
    let chain_poll = chain_poll::validate(&raw)?;
    let access = super::access::validate_access(&raw, raw.api_keys.iter().any(|k| !k.is_blank()))?;
    let accounting = super::access::validate_accounting(&raw.accounting)?;
    let mut escrow = raw.escrow.clone();
    escrow.host_timeouts = HostTimeouts {
        inference_headers: positive_ms("host.inference_headers_ms", raw.host.inference_headers_ms)?,
        query: positive_ms("host.query_ms", raw.host.query_ms)?,
        verify_timeout: positive_ms("host.verify_timeout_ms", raw.host.verify_timeout_ms)?,
    };
    Ok(Config {
        listen,
        workers,
        data_dir: raw.data_dir.clone(),
        key: Arc::new(key),
        admin_api_key: raw.admin_api_key.clone().filter(|k| !k.is_blank()),
        api_keys: raw
            .api_keys
            .iter()
            .filter(|k| !k.is_blank())
            .cloned()
            .collect(),
        chain: ChainSettings {
            rest_url: http_url("chain_rest_url", &raw.chain_rest_url)?,
            public_api_url,
            timeout: positive_ms("chain_timeout_ms", raw.chain_timeout_ms)?,
            route_prefix: prefix.to_string(),
            protocol,
            default_model: default_model.clone(),
            max_nonce: raw.max_nonce,
        },
        default_model,
        default_max_tokens: raw.default_max_tokens,
        max_tokens_cap: raw.max_tokens_cap,
        max_body_bytes: raw.max_body_bytes,
        max_concurrent_races: raw.max_concurrent_races,
        log_level,
        fault_injection: raw.debug_fault_injection,
        shutdown_grace: Duration::from_secs(raw.shutdown_grace_secs),
        escrows: escrow_ids(&raw.escrows)?,
        race: RaceLimits {
            max_attempts: raw.race.max_attempts,
            receipt_timeout: positive_ms("race.receipt_timeout_ms", raw.race.receipt_timeout_ms)?,
            stall_timeout: positive_ms("race.stall_timeout_ms", raw.race.stall_timeout_ms)?,
            attempt_timeout: positive_ms("race.attempt_timeout_ms", raw.race.attempt_timeout_ms)?,
            meta_drain: Duration::from_millis(raw.race.meta_drain_ms),
            sse_max_line_bytes: sse_line_limit(raw.race.sse_max_line_bytes)?,
            ..RaceLimits::default()
        },
        escrow,
        settlement: raw.settlement.clone(),
        rotation: rotation_settings(&raw.rotation)?,
        budget: RestartBudget {
            max_restarts: raw.supervisor.max_restarts,
            window_ms: raw.supervisor.window_ms,
        },
        chain_poll,
        access,
        accounting,
        ca_file: raw.ca_file.clone().filter(|p| !p.as_os_str().is_empty()),
        shaping: raw.shaping.clone(),
        ledger: raw.ledger,
        overload: raw.overload.clone(),
        store: super::store::store_target(&raw.store, &raw.data_dir.join(crate::app::STORE_FILE))?,
    })
}

/// `protocol`, or the version `route_prefix` names; an unsupported version is refused by name.
fn protocol_setting(protocol: &str, prefix: &str) -> Result<Option<ProtocolVersion>, ConfigError> {
    let named = ProtocolVersion::from_route_prefix(prefix)
        .map_err(|e| invalid("route_prefix", e.to_string()))?;
    match non_empty(protocol) {
        Some(p) => ProtocolVersion::parse(&p)
            .map(Some)
            .map_err(|e| invalid("protocol", e.to_string())),
        None => Ok(named),
    }
}

/// `[rotation]`, validated (the first problem names its field).
fn rotation_settings(
    r: &crate::rotation::settings::RotationSettings,
) -> Result<crate::rotation::settings::RotationSettings, ConfigError> {
    match r.validate() {
        Ok(()) => Ok(r.clone()),
        Err(errors) => Err(invalid(
            "rotation",
            errors
                .iter()
                .map(|e| format!("rotation.{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; "),
        )),
    }
}
