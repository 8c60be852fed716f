//! Configuration: defaults, the example file, environment precedence, validation, secrets.

use std::{path::Path, time::Duration};

use devshard_actors::{
    directory::RestartBudget, escrow::EscrowConfig, host::client::HostTimeouts, race::RaceLimits,
};
use devshard_gateway::{
    app::AppError,
    config::{env, Config, ConfigError, EnvMap, RawConfig},
};

use crate::support::key;

fn env_of(pairs: &[(&str, &str)]) -> EnvMap {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn with_key(pairs: &[(&str, &str)]) -> EnvMap {
    let mut e = env_of(pairs);
    e.insert(env::ENV_PRIVATE_KEY.into(), key().secret_hex());
    e
}

fn from_toml(text: &str, env: &EnvMap) -> Result<Config, ConfigError> {
    let mut raw = RawConfig::from_toml_str(text, Path::new("test.toml"))?;
    env::apply(&mut raw, env)?;
    Config::from_raw(raw)
}

fn invalid_key(e: ConfigError) -> &'static str {
    match e {
        ConfigError::Invalid { key, .. } => key,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn defaults_match_the_brief_and_the_actors() {
    let c = Config::load(None, &with_key(&[])).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.default_max_tokens, 3072);
    assert_eq!(c.max_tokens_cap, 4096);
    assert_eq!(c.max_body_bytes, 4 * 1024 * 1024);
    assert_eq!(c.race, RaceLimits::default());
    assert_eq!(c.escrow, EscrowConfig::default());
    assert_eq!(c.escrow.host_timeouts, HostTimeouts::default());
    let b = RestartBudget::default();
    assert_eq!(
        (c.budget.max_restarts, c.budget.window_ms),
        (b.max_restarts, b.window_ms)
    );
    assert_eq!(c.shutdown_grace, Duration::from_secs(30));
    assert_eq!(c.chain.rest_url, "http://localhost:1317");
    assert_eq!(c.chain.max_nonce, 20_000);
    assert!(c.admin_api_key.is_none() && c.api_keys.is_empty() && c.escrows.is_empty());
    assert!(c.workers >= 1);
    assert_eq!(c.key.address(), key().address());
}

#[test]
fn example_file_lists_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config.example.toml");
    let raw = RawConfig::from_file(&path).unwrap();
    assert_eq!(raw, RawConfig::default());
}

#[test]
fn rotation_is_read_from_the_file_and_validated() {
    let text = "[rotation]\ncheck_interval_ms = 1000\n[[rotation.models]]\nmodel = \"m\"\n\
                target_count = 2\namount = 10\nmax_deposit_per_day = 30\n";
    let c = from_toml(text, &with_key(&[])).unwrap();
    assert!(c.rotation.active());
    let m = c.rotation.model("m").unwrap();
    assert_eq!(
        (m.target_count, m.amount, m.max_deposit_per_day),
        (2, 10, 30)
    );
    assert!(!Config::load(None, &with_key(&[]))
        .unwrap()
        .rotation
        .active());
    let capped = text.replace("max_deposit_per_day = 30", "max_deposit_per_day = 5");
    let e = from_toml(&capped, &with_key(&[])).unwrap_err();
    assert!(
        e.to_string()
            .contains("rotation.models[0].max_deposit_per_day"),
        "{e}"
    );
    assert_eq!(invalid_key(e), "rotation");
    // Settled escrows stay an hour unless the file says otherwise (0: forever; at most a year).
    assert_eq!(c.rotation.settled_retention_s, 3_600);
    let kept = text.replace("[rotation]\n", "[rotation]\nsettled_retention_s = 0\n");
    assert_eq!(
        from_toml(&kept, &with_key(&[]))
            .unwrap()
            .rotation
            .settled_retention_s,
        0
    );
    let long = text.replace(
        "[rotation]\n",
        "[rotation]\nsettled_retention_s = 31536001\n",
    );
    let e = from_toml(&long, &with_key(&[])).unwrap_err();
    assert!(
        e.to_string().contains("rotation.settled_retention_s"),
        "{e}"
    );
}

#[test]
fn file_values_apply_and_env_wins() {
    let toml = r#"
        listen = "0.0.0.0:9000"
        default_max_tokens = 100
        escrows = ["7", "8"]
        [race]
        max_attempts = 5
    "#;
    let c = from_toml(toml, &with_key(&[])).unwrap();
    assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(c.default_max_tokens, 100);
    assert_eq!(c.escrows, vec!["7", "8"]);
    assert_eq!(c.race.max_attempts, 5);

    let e = with_key(&[
        (env::ENV_LISTEN, "127.0.0.1:7000"),
        (env::ENV_DEFAULT_MAX_TOKENS, "200"),
        (env::ENV_ESCROWS, "9, 10"),
        (env::ENV_META_DRAIN_TIMEOUT_SECONDS, "3"),
    ]);
    let c = from_toml(toml, &e).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:7000");
    assert_eq!(c.default_max_tokens, 200);
    assert_eq!(c.escrows, vec!["9", "10"]);
    assert_eq!(c.race.meta_drain, Duration::from_secs(3));
}

#[test]
fn primary_names_win_over_upstream_aliases_and_empty_is_unset() {
    let e = with_key(&[
        (env::ENV_CHAIN_REST_URL, "http://primary:1317"),
        (env::ENV_CHAIN_REST, "http://alias:1317"),
        (env::ENV_GATEWAY_MAX_TOKENS_CAP, "8000"),
        (env::ENV_MODEL, ""),
    ]);
    let c = Config::load(None, &e).unwrap();
    assert_eq!(c.chain.rest_url, "http://primary:1317");
    assert_eq!(c.max_tokens_cap, 8000);
    assert_eq!(c.default_model, None);
    let c = Config::load(None, &with_key(&[(env::ENV_PORT, "9999")])).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:9999");
    let c = Config::load(None, &with_key(&[(env::ENV_ESCROW_ID, "5")])).unwrap();
    assert_eq!(c.escrows, vec!["5"]);
}

#[test]
fn secrets_come_from_the_environment() {
    let e = with_key(&[
        (env::ENV_ADMIN_API_KEY, "admin-secret"),
        (env::ENV_API_KEYS, "k1, k2,,"),
        (env::ENV_DEBUG_FAULT_INJECTION, "1"),
    ]);
    let c = Config::load(None, &e).unwrap();
    assert_eq!(c.admin_api_key.as_ref().unwrap().expose(), "admin-secret");
    let keys: Vec<&str> = c.api_keys.iter().map(|k| k.expose()).collect();
    assert_eq!(keys, vec!["k1", "k2"]);
    assert!(c.fault_injection);
    // Secrets in the file are unknown keys, not silently accepted.
    let err = from_toml("private_key = \"00\"", &with_key(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let hex = key().secret_hex();
    let e = with_key(&[
        (env::ENV_ADMIN_API_KEY, "admin-secret-value"),
        (env::ENV_API_KEYS, "api-secret-value"),
    ]);
    let c = Config::load(None, &e).unwrap();
    let mut raw = RawConfig::default();
    env::apply(&mut raw, &e).unwrap();
    for text in [format!("{c:?}"), format!("{raw:?}"), format!("{c:#?}")] {
        assert!(!text.contains(&hex), "private key leaked: {text}");
        assert!(!text.contains("admin-secret-value"), "admin key leaked");
        assert!(!text.contains("api-secret-value"), "api key leaked");
    }
    // A malformed key is not echoed in the error either.
    let bad = "zz".repeat(32);
    let err = Config::load(None, &env_of(&[(env::ENV_PRIVATE_KEY, &bad)])).unwrap_err();
    assert!(matches!(err, ConfigError::Key { .. }), "{err:?}");
    assert!(!err.to_string().contains(&bad));
}

#[test]
fn key_file_is_read_and_both_sources_conflict() {
    let dir = std::env::temp_dir().join(format!("edge-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("key.hex");
    std::fs::write(&path, format!("{}\n", key().secret_hex())).unwrap();
    let p = path.to_string_lossy().into_owned();
    let c = Config::load(None, &env_of(&[(env::ENV_PRIVATE_KEY_FILE, &p)])).unwrap();
    assert_eq!(c.key.address(), key().address());
    let e = with_key(&[(env::ENV_PRIVATE_KEY_FILE, &p)]);
    let err = Config::load(None, &e).unwrap_err();
    assert!(matches!(err, ConfigError::Env { .. }), "{err:?}");
    let missing = dir.join("absent.hex").to_string_lossy().into_owned();
    let err = Config::load(None, &env_of(&[(env::ENV_PRIVATE_KEY_FILE, &missing)])).unwrap_err();
    assert!(matches!(err, ConfigError::KeyFile { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_values_are_named() {
    assert_eq!(
        Config::load(None, &EnvMap::new()).unwrap_err(),
        ConfigError::MissingKey
    );
    let cases: &[(&str, &str)] = &[
        ("default_max_tokens = 5000", "default_max_tokens"),
        ("max_tokens_cap = 0", "max_tokens_cap"),
        ("listen = \"localhost\"", "listen"),
        ("chain_rest_url = \"ftp://node:1317\"", "chain_rest_url"),
        ("protocol = \"v5\"", "protocol"),
        ("route_prefix = \"/devshard/v6\"", "route_prefix"),
        ("[race]\nsse_max_line_bytes = 10", "race.sse_max_line_bytes"),
        ("chain_rest_url = \"node:1317\"", "chain_rest_url"),
        ("escrows = [\"42\", \"42\"]", "escrows"),
        ("escrows = [\"abc\"]", "escrows"),
        ("log_level = \"loud\"", "log_level"),
        ("route_prefix = \"v1/devshard/\"", "route_prefix"),
        ("max_concurrent_races = 0", "max_concurrent_races"),
        ("max_body_bytes = 10", "max_body_bytes"),
        ("[race]\nmax_attempts = 0", "race.max_attempts"),
        ("[host]\nquery_ms = 0", "host.query_ms"),
    ];
    for (toml, key) in cases {
        let err = from_toml(toml, &with_key(&[])).unwrap_err();
        assert!(err.to_string().contains(key), "{toml}: {err}");
        assert_eq!(invalid_key(err), *key, "{toml}");
    }
}

#[test]
fn bad_environment_values_name_the_variable() {
    let cases: &[(&str, &str)] = &[
        (env::ENV_DEBUG_FAULT_INJECTION, "maybe"),
        (env::ENV_MAX_BODY_BYTES, "lots"),
        (env::ENV_PORT, "99999"),
        (env::ENV_WORKERS, "-1"),
    ];
    for (name, value) in cases {
        let err = Config::load(None, &with_key(&[(name, value)])).unwrap_err();
        assert!(err.to_string().contains(name), "{name}: {err}");
        assert!(matches!(err, ConfigError::Env { .. }));
    }
}

#[test]
fn unknown_keys_and_bad_files_are_rejected() {
    let err = from_toml("listn = \"x\"", &with_key(&[])).unwrap_err();
    assert!(err.to_string().contains("listn"), "{err}");
    let err = from_toml("[race]\nmax_attempt = 1", &with_key(&[])).unwrap_err();
    assert!(err.to_string().contains("max_attempt"), "{err}");
    let err = Config::load(Some(Path::new("/nonexistent/gw.toml")), &with_key(&[])).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
}

#[test]
fn invalid_config_exits_with_64() {
    assert_eq!(ConfigError::EXIT_CODE, 64);
    assert_eq!(AppError::Config(ConfigError::MissingKey).exit_code(), 64);
}
