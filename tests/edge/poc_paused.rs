//! Phase gating on the paused clock: the in-process app (no worker threads, memory store) and
//! its chain poller share one `TokioClock` with the simulated chain, which starts at the first
//! block of a default PoC (70 blocks of 6 s). A refused request gets a `Retry-After` that is the
//! real remaining PoC time, consumes no nonce, and the same request is served once that time
//! (plus one phase poll) has passed.

use std::{sync::Arc, time::Duration};

use actix_web::{http::StatusCode, test};
use devshard_actors::{
    clock::TokioClock,
    directory::{Directory, DirectoryDeps},
    metrics::ActorMetrics,
    stats::{ActorRegistry, TrackedActor},
    store::{MemoryStore, SharedStore},
};
use devshard_gateway::{
    app::build_app,
    config::{Config, RawConfig, Secret},
    escrows, logging,
    metrics::{self, HttpMetrics},
    sim::{EpochSchedule, Profile, SimConfig, SimNetwork},
    state::{polling::PollerWiring, AppState, StateParts},
};

use crate::support::{call, snapshot};

const T0_MS: i64 = 1_700_000_000_000;
const CHAT: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"paused PoC"}]}"#;

fn chat() -> test::TestRequest {
    test::TestRequest::post()
        .uri("/v1/chat/completions")
        .insert_header(("content-type", "application/json"))
        .set_payload(CHAT)
}

#[actix_rt::test]
async fn retry_after_is_the_remaining_poc_and_the_request_is_served_after_it() {
    tokio::time::pause();
    let clock = TokioClock::anchored_at(T0_MS).shared();
    let mut cfg = SimConfig::with_seed("edge-poc-paused");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg.epochs = EpochSchedule {
        start_offset_blocks: Some(0),
        ..EpochSchedule::default()
    };
    let poc_ms = cfg.epochs.poc_blocks() * cfg.epochs.block_time_ms;
    let sim = SimNetwork::start(cfg, clock.clone()).await.unwrap();
    assert!(sim.epoch().is_poc());

    let config = Config::from_raw(RawConfig {
        private_key: Some(Secret::new(sim.gateway_key().secret_hex())),
        chain_rest_url: sim.chain_url().to_string(),
        public_api_url: sim.chain_url().to_string(),
        ..RawConfig::default()
    })
    .unwrap();
    let log = logging::discard();
    let store: SharedStore = Arc::new(MemoryStore::new());
    let actor_metrics = ActorMetrics::detached().unwrap();
    let actors = ActorRegistry::default();
    let directory = Directory::new(DirectoryDeps {
        key: config.key.clone(),
        store: store.clone(),
        clock: clock.clone(),
        log: log.clone(),
        escrow_cfg: config.escrow.clone(),
        budget: config.budget,
        fault_injection: false,
        metrics: actor_metrics.clone(),
        actors: actors.clone(),
        warm: devshard_actors::protocol::warm::WarmKeyChecker::rest(
            &config.chain.rest_url,
            clock.clone(),
            devshard_actors::protocol::warm::WarmKeyMetrics::detached().unwrap(),
            log.clone(),
        ),
    });
    let board = directory.board();
    let directory = directory.start_tracked();
    let registry = metrics::new_registry().unwrap();
    let parts = StateParts {
        board,
        directory: directory.clone(),
        actors: actors.clone(),
        store: store.clone(),
        metrics: HttpMetrics::register(&registry).unwrap(),
        actor_metrics,
        registry,
        clock: clock.clone(),
        log: log.clone(),
    };
    let mut state = AppState::new(&config, parts);
    let (registry, chain_url) = (state.registry.clone(), sim.chain_url().to_string());
    let store_for_registration = store.clone();
    state
        .polling
        .start_poller(
            &chain_url,
            PollerWiring {
                registry: &registry,
                clock: clock.clone(),
                log: &log,
                directory: directory.clone(),
                store,
                actors: &actors,
            },
        )
        .unwrap();
    // Registration takes the participants from the poller's first snapshot.
    let ids = ["42".to_string()];
    let added = escrows::register_configured(
        &state.chain,
        &directory,
        &store_for_registration,
        &state.signer,
        &state.polling,
        &ids,
        &log,
    )
    .await;
    assert_eq!(added, 1);
    let polling = state.polling.clone();
    let app = test::init_service(build_app(state)).await;

    // The first phase poll goes out at start.
    while polling.view().and_then(|v| v.epoch.clone()).is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, headers, body) = call(&app, chat().to_request()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "poc_in_progress");
    let retry_s: u64 = headers
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let poc_s = poc_ms / 1_000;
    assert!(
        (poc_s - 10..=poc_s).contains(&retry_s),
        "Retry-After {retry_s} s, PoC lasts {poc_s} s"
    );
    assert_eq!(
        snapshot(&directory, "42").await.nonce,
        0,
        "no nonce consumed"
    );

    // Shortly before the announced end: still refused, with a shorter Retry-After.
    tokio::time::sleep(Duration::from_secs(retry_s - 30)).await;
    let (status, headers, _) = call(&app, chat().to_request()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let later: u64 = headers
        .get("retry-after")
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (1..=40).contains(&later),
        "Retry-After {later} s near the end"
    );
    assert_eq!(snapshot(&directory, "42").await.nonce, 0);

    // After the end plus one jittered phase interval (≤ 22 s): served.
    tokio::time::sleep(Duration::from_secs(30 + 23)).await;
    assert!(!sim.epoch().is_poc());
    let (status, _, body) = call(&app, chat().to_request()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(snapshot(&directory, "42").await.nonce, 1);
}
