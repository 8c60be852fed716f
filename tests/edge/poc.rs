//! Phase gating through `app::start_with` (the poller started from the configuration and the
//! environment): the gateway polls the simulated chain, which starts in a 5 s PoC of 100 ms
//! blocks, in real time (HTTP workers run on their own threads, so the clock cannot be paused;
//! each test ends well inside the PoC). A new chat request is refused with 503 + `Retry-After`
//! and consumes no nonce; in `relaxed` mode it is served. `poc_paused.rs` covers the end of PoC
//! and the `Retry-After` value on the paused clock.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use devshard_actors::clock::TokioClock;
use devshard_gateway::{
    app::{self, RunningGateway, StartOptions},
    config::{env, Config},
    logging,
    sim::{EpochSchedule, Profile, SimConfig, SimNetwork},
};
use serde_json::Value;

const ADMIN: &str = "poc-admin";
const CHAT: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"during PoC?"}]}"#;

/// A chain that starts at the first block of a 50-block PoC of 100 ms blocks.
pub(crate) fn sim_config(seed: &str) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg.epochs = EpochSchedule {
        block_time_ms: 100,
        epoch_length: 1_000,
        poc_generate_blocks: 30,
        poc_generate_wind_down_blocks: 5,
        poc_validate_blocks: 10,
        poc_validate_wind_down_blocks: 5,
        start_offset_blocks: Some(0),
        ..EpochSchedule::default()
    };
    cfg
}

async fn start(seed: &str, mode: &str) -> (SimNetwork, RunningGateway, PathBuf) {
    start_with(sim_config(seed), mode).await
}

/// [`start`] over a simulated network configured by the caller.
pub(crate) async fn start_with(
    cfg: SimConfig,
    mode: &str,
) -> (SimNetwork, RunningGateway, PathBuf) {
    let clock = TokioClock::new().shared();
    let seed = cfg.seed.clone();
    let sim = SimNetwork::start(cfg, clock.clone()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("edge-poc-{seed}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pairs = [
        (env::ENV_LISTEN, "127.0.0.1:0".to_string()),
        (env::ENV_DATA_DIR, dir.display().to_string()),
        (env::ENV_PRIVATE_KEY, sim.gateway_key().secret_hex()),
        (env::ENV_CHAIN_REST_URL, sim.chain_url().to_string()),
        (env::ENV_PUBLIC_API_URL, sim.chain_url().to_string()),
        (env::ENV_ESCROWS, "42".to_string()),
        (env::ENV_ADMIN_API_KEY, ADMIN.to_string()),
        (env::ENV_WORKERS, "1".to_string()),
        (env::ENV_SHUTDOWN_GRACE_SECONDS, "1".to_string()),
        (env::ENV_CHAIN_PHASE_POLL_INTERVAL, "300ms".to_string()),
        (env::ENV_PARTICIPANTS_POLL_INTERVAL, "1s".to_string()),
        (env::ENV_VERSIONS_POLL_INTERVAL, "5s".to_string()),
        (env::ENV_PUBLIC_API_REQUESTS_PER_MINUTE, "600".to_string()),
        (env::ENV_POC_REQUEST_MODE, mode.to_string()),
    ];
    let env = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let config = Config::load(None, &env).unwrap();
    let opts = StartOptions {
        registry: None,
        clock: Some(clock),
    };
    let gw = app::start_with(config, logging::discard(), opts)
        .await
        .unwrap();
    (sim, gw, dir)
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish()
}

pub(crate) async fn chat(url: &str) -> (u16, Option<String>, Value) {
    let mut res = client()
        .post(format!("{url}/v1/chat/completions"))
        .insert_header(("content-type", "application/json"))
        .send_body(CHAT)
        .await
        .unwrap();
    let retry = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = res.body().await.unwrap();
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (res.status().as_u16(), retry, json)
}

async fn admin_get(url: &str, path: &str) -> (u16, Value) {
    let mut res = client()
        .get(format!("{url}{path}"))
        .insert_header(("authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

pub(crate) async fn nonce(url: &str) -> u64 {
    let (_, v) = admin_get(url, "/v1/admin/escrows/42").await;
    v["snapshot"]["nonce"].as_u64().unwrap()
}

/// Polls `/v1/debug/chain` until the admission of the escrow's model is `want`.
pub(crate) async fn wait_for_admission(url: &str, model: &str, want: &str) -> Value {
    wait_for_admission_within(url, model, want, Duration::from_secs(10)).await
}

/// [`wait_for_admission`] with its own deadline.
pub(crate) async fn wait_for_admission_within(
    url: &str,
    model: &str,
    want: &str,
    within: Duration,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, view) = admin_get(url, "/v1/debug/chain").await;
        assert_eq!(status, 200, "{view}");
        if view["admission"][model]["admission"] == want {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "admission never became {want}: {view}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_rt::test]
async fn started_gateway_refuses_chat_during_poc_without_a_nonce() {
    let (sim, gw, dir) = start("edge-poc-off", "off").await;
    let model = sim.config().model.clone();
    let view = wait_for_admission(&gw.url, &model, "refuse").await;
    assert_eq!(view["epoch"]["phase_kind"], "poc", "{view}");
    assert!(view["endpoints"][0]["next_poll_ms"].is_i64(), "{view}");
    assert_eq!(nonce(&gw.url).await, 0);

    let (status, retry, body) = chat(&gw.url).await;
    assert!(sim.epoch().is_poc(), "the chain was still in PoC");
    assert_eq!(status, 503, "{body}");
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=3_600).contains(&retry), "{retry}");
    assert_eq!(body["error"]["code"], "poc_in_progress", "{body}");
    assert_eq!(body["error"]["type"], "service_unavailable");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("devshard temporarily unavailable during PoC"),
        "{message}"
    );
    assert_eq!(
        nonce(&gw.url).await,
        0,
        "a refused request consumes no nonce"
    );

    gw.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix_rt::test]
async fn relaxed_mode_serves_during_poc() {
    let (sim, gw, dir) = start("edge-poc-relaxed", "relaxed").await;
    let model = sim.config().model.clone();
    let view = wait_for_admission(&gw.url, &model, "serve_only").await;
    let preserved = view["admission"][&model]["preserved"].as_array().unwrap();
    assert!(!preserved.is_empty(), "{view}");
    let (status, _, body) = chat(&gw.url).await;
    assert!(sim.epoch().is_poc(), "the chain was still in PoC");
    assert_eq!(status, 200, "{body}");
    gw.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
