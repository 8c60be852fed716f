//! Settings across restarts of the in-process gateway on one data directory: admin changes are
//! persisted and win over the file; the environment always wins (and pins its fields against
//! the API); persisted changes that no longer validate with the file are ignored. Also the
//! `[chain_poll]` table and its environment variables in the configuration.

use std::path::{Path, PathBuf};

use devshard_actors::{
    chain::{ChainPollSettings, PocMode},
    store::Store,
};
use devshard_gateway::{
    app::{self, RunningGateway},
    config::{env, Config, ConfigError, EnvMap, RawConfig},
    logging,
};
use serde_json::{json, Value};

use crate::support::{key, DEAD_HOST};

const ADMIN: &str = "persist-admin";

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edge-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn with_key(pairs: &[(&str, &str)]) -> EnvMap {
    let mut e: EnvMap = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    e.insert(env::ENV_PRIVATE_KEY.into(), key().secret_hex());
    e
}

fn load(toml: &str, env: &EnvMap) -> Result<Config, ConfigError> {
    let mut raw = RawConfig::from_toml_str(toml, Path::new("test.toml"))?;
    env::apply(&mut raw, env)?;
    Config::from_raw(raw)
}

/// A gateway on `dir` with `[chain_poll]` = `chain_poll` and extra environment.
async fn start(dir: &Path, chain_poll: &str, pairs: &[(&str, &str)]) -> RunningGateway {
    let toml = format!(
        "listen = \"127.0.0.1:0\"\nworkers = 1\nshutdown_grace_secs = 1\ndata_dir = {:?}\n\
         chain_rest_url = \"{DEAD_HOST}\"\n[chain_poll]\n{chain_poll}\n",
        dir.display().to_string()
    );
    let mut env = with_key(pairs);
    env.insert(env::ENV_ADMIN_API_KEY.into(), ADMIN.into());
    let cfg = load(&toml, &env).unwrap();
    app::start(cfg, logging::discard()).await.unwrap()
}

async fn settings(gw: &RunningGateway, patch: Option<Value>) -> (u16, Value) {
    let client = awc::Client::default();
    let url = format!("{}/v1/admin/settings", gw.url);
    let auth = ("authorization", format!("Bearer {ADMIN}"));
    let mut res = match patch {
        None => client.get(url).insert_header(auth).send().await,
        Some(p) => client.put(url).insert_header(auth).send_json(&p).await,
    }
    .unwrap();
    (res.status().as_u16(), res.json().await.unwrap())
}

#[actix_web::test]
async fn admin_changes_survive_restarts_between_file_and_environment() {
    let dir = temp_dir("settings-restart");
    let file = "participants_poll_interval_ms = 120000\nversions_poll_interval_ms = 600000";
    let gw = start(&dir, file, &[]).await;
    let (_, body) = settings(&gw, None).await;
    assert_eq!(body["chain_poll"]["participants_poll_interval_ms"], 120000);
    let patch = json!({
        "health": {"hedge_budget": 0.2},
        "chain_poll": {"chain_phase_poll_interval_ms": 40000, "participants_poll_interval_ms": 90000},
    });
    let (status, body) = settings(&gw, Some(patch)).await;
    assert_eq!(status, 200, "{body}");
    gw.stop(true).await.unwrap();

    // Same file: the admin's changes win over it; untouched fields still follow it.
    let gw = start(&dir, file, &[]).await;
    let (_, body) = settings(&gw, None).await;
    assert_eq!(body["health"]["hedge_budget"], 0.2);
    let c = &body["chain_poll"];
    assert_eq!(
        c["chain_phase_poll_interval_ms"], 40000,
        "persisted beats file"
    );
    assert_eq!(
        c["participants_poll_interval_ms"], 90000,
        "persisted beats file"
    );
    assert_eq!(c["versions_poll_interval_ms"], 600000, "file beats default");
    // `null` hands a field back to the file.
    let patch = json!({"chain_poll": {"participants_poll_interval_ms": null}});
    let (status, body) = settings(&gw, Some(patch)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["chain_poll"]["participants_poll_interval_ms"], 120000);
    gw.stop(true).await.unwrap();

    // The environment wins over persisted changes, and the API cannot change what it sets.
    let pins = [
        (env::ENV_CHAIN_PHASE_POLL_INTERVAL, "30s"),
        (env::ENV_POC_REQUEST_MODE, "relaxed"),
    ];
    let gw = start(&dir, file, &pins).await;
    let (_, body) = settings(&gw, None).await;
    assert_eq!(body["chain_poll"]["chain_phase_poll_interval_ms"], 30000);
    assert_eq!(body["chain_poll"]["poc_request_mode"], "relaxed");
    assert_eq!(body["chain_poll"]["participants_poll_interval_ms"], 120000);
    let (status, body) = settings(
        &gw,
        Some(json!({"chain_poll": {"chain_phase_poll_interval_ms": 50000}})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["param"],
        "chain_poll.chain_phase_poll_interval_ms"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(env::ENV_CHAIN_PHASE_POLL_INTERVAL),
        "{message}"
    );
    // Restating the pinned value is fine; other fields change as usual.
    let patch = json!({"chain_poll": {"chain_phase_poll_interval_ms": 30000, "participants_poll_interval_ms": 25000}});
    let (status, body) = settings(&gw, Some(patch)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["chain_poll"]["participants_poll_interval_ms"], 25000);
    let stored = gw.store.get("settings", "chain_poll").unwrap().unwrap();
    assert_eq!(
        stored,
        json!({"chain_phase_poll_interval_ms": 40000, "participants_poll_interval_ms": 25000}),
        "a pinned field is never persisted from the API"
    );
    gw.stop(true).await.unwrap();

    // A file with a smaller budget: the persisted 40 s / 25 s would break it, so they are
    // ignored (logged) and the file and defaults apply.
    let strict = "public_api_requests_per_minute = 3\nchain_phase_poll_interval_ms = 60000\n\
                  participants_poll_interval_ms = 300000\nversions_poll_interval_ms = 600000";
    let gw = start(&dir, strict, &[]).await;
    let (_, body) = settings(&gw, None).await;
    assert_eq!(body["chain_poll"]["chain_phase_poll_interval_ms"], 60000);
    assert_eq!(body["chain_poll"]["participants_poll_interval_ms"], 300000);
    assert_eq!(body["health"]["hedge_budget"], 0.2, "health is unaffected");
    gw.stop(true).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn chain_poll_table_and_environment() {
    let c = load("", &with_key(&[])).unwrap();
    assert_eq!(c.chain_poll.settings, ChainPollSettings::default());
    assert!(c.chain_poll.pinned.is_empty());

    let toml = "[chain_poll]\nchain_phase_poll_interval_ms = 30000\npoc_request_mode = \"relaxed\"";
    let c = load(toml, &with_key(&[])).unwrap();
    assert_eq!(c.chain_poll.settings.chain_phase_poll_interval_ms, 30000);
    assert_eq!(c.chain_poll.settings.poc_request_mode, PocMode::Relaxed);

    let e = with_key(&[
        (env::ENV_CHAIN_PHASE_POLL_INTERVAL, "1m"),
        (env::ENV_PUBLIC_API_REQUESTS_PER_MINUTE, "8"),
        (env::ENV_POC_REQUEST_MODE, "off"),
        (env::ENV_VERSIONS_POLL_INTERVAL, ""),
    ]);
    let c = load(toml, &e).unwrap();
    let s = &c.chain_poll.settings;
    assert_eq!(s.chain_phase_poll_interval_ms, 60000, "env beats file");
    assert_eq!(s.public_api_requests_per_minute, 8);
    assert_eq!(s.poc_request_mode, PocMode::Off);
    assert_eq!(s.versions_poll_interval_ms, 300000, "empty is unset");
    let pinned: Vec<&str> = c.chain_poll.pinned.keys().map(String::as_str).collect();
    assert_eq!(
        pinned,
        [
            "chain_phase_poll_interval_ms",
            "poc_request_mode",
            "public_api_requests_per_minute"
        ]
    );

    // A malformed variable names itself; a budget violation names `chain_poll`; both exit 64.
    for (name, value) in [
        (env::ENV_CHAIN_PHASE_POLL_INTERVAL, "20"),
        (env::ENV_PUBLIC_API_REQUESTS_PER_MINUTE, "many"),
        (env::ENV_POC_REQUEST_MODE, "sometimes"),
    ] {
        let err = load("", &with_key(&[(name, value)])).unwrap_err();
        assert!(
            matches!(err, ConfigError::Env { name: n, .. } if n == name),
            "{err:?}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }
    let err = load("", &with_key(&[(env::ENV_CHAIN_PHASE_POLL_INTERVAL, "5s")])).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                key: "chain_poll",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("public_api_requests_per_minute"),
        "{err}"
    );
    let err = load("[chain_poll]\npoll_jitter_percent = 90", &with_key(&[])).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                key: "chain_poll",
                ..
            }
        ),
        "{err:?}"
    );
    let err = load("[chain_poll]\nphase_interval = 1", &with_key(&[])).unwrap_err();
    assert!(err.to_string().contains("phase_interval"), "{err}");
    assert_eq!(ConfigError::EXIT_CODE, 64);
}
