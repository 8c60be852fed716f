//! Overload control at the edge on the paused clock (issue 16): the in-process app in front of
//! the simulated hosts (real loopback HTTP), closed-loop clients, and host latency that steps
//! from 100 ms to 1 s. The adaptive limit rises while latency is low and falls after the step;
//! requests past the queue's depth or deadline get 503 `gateway_saturated` + `Retry-After` (the
//! clients honour it); no request gets any other 5xx; the limiter is visible in
//! `/v1/debug/actors` and `/metrics`.

use std::{cell::RefCell, sync::Arc, time::Duration};

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
    overload::settings::OverloadSettings,
    sim::{LatencyProfile, Profile, SimConfig, SimNetwork},
    state::{AppState, StateParts},
};
use futures::future::join_all;
use tokio::time::Instant;

use crate::support::call;

const CLIENTS: usize = 24;
const ADMIN: &str = "overload-admin";

fn chat(i: usize) -> test::TestRequest {
    let body = format!(r#"{{"max_tokens":8,"messages":[{{"role":"user","content":"load {i}"}}]}}"#);
    test::TestRequest::post()
        .uri("/v1/chat/completions")
        .insert_header(("content-type", "application/json"))
        .set_payload(body)
}

fn latency(receipt_ms: u64) -> LatencyProfile {
    LatencyProfile {
        receipt_ms,
        ..LatencyProfile::zero()
    }
}

/// Statuses seen, and the limit's range over the phase.
#[derive(Default, Debug)]
struct Seen {
    ok: usize,
    shed: usize,
    other: Vec<String>,
    lo: usize,
    hi: usize,
}

#[actix_rt::test]
async fn the_limit_follows_latency_and_sheds_are_503_with_retry_after_and_nothing_else_fails() {
    tokio::time::pause();
    let clock = TokioClock::anchored_at(1_700_000_000_000).shared();
    let mut cfg = SimConfig::with_seed("edge-overload");
    cfg.hosts = 3;
    cfg.profile = Profile::Custom(vec![latency(100)]);
    cfg.validation_rate = 0.0;
    let sim = SimNetwork::start(cfg, clock.clone()).await.unwrap();
    let config = Config::from_raw(RawConfig {
        private_key: Some(Secret::new(sim.gateway_key().secret_hex())),
        admin_api_key: Some(Secret::new(ADMIN)),
        chain_rest_url: sim.chain_url().to_string(),
        max_concurrent_races: 64,
        overload: OverloadSettings {
            initial_limit: 4,
            min_limit: 2,
            queue_depth: 4,
            queue_timeout_ms: 300,
            window_ms: 1_000,
            window_samples: 5,
            smoothing: 0.5,
            long_window: 20,
            ..OverloadSettings::default()
        },
        ..RawConfig::default()
    })
    .unwrap();
    let log = logging::discard();
    let store: SharedStore = Arc::new(MemoryStore::new());
    let actors = ActorRegistry::default();
    let directory = Directory::new(DirectoryDeps {
        key: config.key.clone(),
        store: store.clone(),
        clock: clock.clone(),
        log: log.clone(),
        escrow_cfg: config.escrow.clone(),
        budget: config.budget,
        fault_injection: false,
        metrics: ActorMetrics::detached().unwrap(),
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
        actors,
        store: store.clone(),
        metrics: HttpMetrics::register(&registry).unwrap(),
        actor_metrics: ActorMetrics::detached().unwrap(),
        registry,
        clock: clock.clone(),
        log: log.clone(),
    };
    let state = AppState::new(&config, parts);
    let model = sim.config().model.clone();
    escrows::register(
        &state.chain,
        &directory,
        &store,
        &state.signer,
        &state.polling,
        "42",
        Some(&model),
        None,
        None,
    )
    .await
    .unwrap();
    let app = test::init_service(build_app(state.clone())).await;
    let limiter = state.overload.clone();

    // One phase: CLIENTS closed-loop clients for `secs` virtual seconds.
    let seen = RefCell::new(Seen {
        lo: usize::MAX,
        ..Seen::default()
    });
    let phase = |secs: u64| {
        let end = Instant::now() + Duration::from_secs(secs);
        let seen = &seen;
        let (app, limiter) = (&app, &limiter);
        let client = move |c: usize| async move {
            let mut i = c * 100_000;
            while Instant::now() < end {
                i += 1;
                let (status, headers, body) = call(app, chat(i).to_request()).await;
                let v = limiter.view().limit;
                let retry = headers.get("retry-after").and_then(|v| v.to_str().ok());
                let code = body["error"]["code"].as_str().unwrap_or_default();
                let message = body["error"]["message"].as_str().unwrap_or_default();
                let shed = status == StatusCode::SERVICE_UNAVAILABLE
                    && code == "gateway_saturated"
                    && message.contains("the gateway is saturated")
                    && retry == Some("1");
                {
                    let mut s = seen.borrow_mut();
                    (s.lo, s.hi) = (s.lo.min(v), s.hi.max(v));
                    if status == StatusCode::OK {
                        s.ok += 1;
                    } else if shed {
                        s.shed += 1;
                    } else {
                        s.other.push(format!("{status}: {body}"));
                    }
                }
                if shed {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        join_all((0..CLIENTS).map(client))
    };

    phase(15).await;
    let low = std::mem::replace(
        &mut *seen.borrow_mut(),
        Seen {
            lo: usize::MAX,
            ..Seen::default()
        },
    );
    eprintln!("100 ms: {low:?}");
    assert!(low.other.is_empty(), "{:?}", low.other);
    assert!(
        low.hi >= 10,
        "the limit rose from 4 to {} under 100 ms",
        low.hi
    );
    assert!(low.ok > 500 && low.shed > 0, "{low:?}");
    let risen = limiter.view().limit;

    for i in 0..3 {
        sim.set_latency(i, latency(1_000)).unwrap();
    }
    phase(15).await;
    let high = std::mem::take(&mut *seen.borrow_mut());
    eprintln!("1 s: {high:?}, limiter {:?}", limiter.view());
    assert!(high.other.is_empty(), "{:?}", high.other);
    assert!(
        high.lo * 2 <= risen,
        "the limit fell from {risen} to {} after the step to 1 s",
        high.lo
    );
    assert!(high.ok > 0 && high.shed > 0, "{high:?}");
    let view = limiter.view();
    assert!(
        view.shed_queue_full > 0 && view.shed_queue_timeout > 0,
        "{view:?}"
    );
    assert_eq!(
        view.shed_queue_full + view.shed_queue_timeout,
        (low.shed + high.shed) as u64,
        "every 503 the clients saw is a counted shed"
    );

    let listing = test::TestRequest::get()
        .uri("/v1/debug/actors?kind=limiter")
        .insert_header(("authorization", format!("Bearer {ADMIN}")))
        .to_request();
    let (status, _, body) = call(&app, listing).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let entry = &body["data"][0];
    assert_eq!(
        (entry["kind"].as_str(), entry["id"].as_str()),
        (Some("limiter"), Some("edge"))
    );
    assert_eq!(entry["detail"]["limit"], view.limit);
    assert_eq!(
        entry["detail"]["shed_queue_timeout"],
        view.shed_queue_timeout
    );
    let (_, _, text) =
        crate::support::call_text(&app, test::TestRequest::get().uri("/metrics").to_request())
            .await;
    assert!(
        text.contains(&format!(
            "devshard_gateway_concurrency_limit {}",
            view.limit
        )),
        "{text}"
    );
    assert!(text.contains(r#"devshard_gateway_limit_rejections_total{reason="queue_timeout"}"#));
}
