//! Overload control at the edge on the paused clock (issue 16): the in-process app in front of
//! the simulated hosts (real loopback HTTP) and closed-loop clients. The adaptive limit measures
//! the gateway's own share of a request (admission to its first attempt sent), so: it rises
//! while the gateway keeps up; a step of the *hosts'* latency from 100 ms to 1 s leaves it and
//! sheds nothing; a step of the *gateway's* own latency (its durable diff writes slow to one per
//! 100 ms, a store that cannot keep up) makes it fall, and requests past the queue's depth or
//! deadline get 503 `gateway_saturated` + `Retry-After` (the clients honour it). No request gets
//! any other 5xx; the limiter is visible in `/v1/debug/actors` and `/metrics`.

use std::{
    cell::RefCell,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use actix_web::{http::StatusCode, test};
use devshard_actors::{
    clock::{SharedClock, TokioClock},
    directory::{Directory, DirectoryDeps},
    metrics::ActorMetrics,
    protocol::{diff::Diff, warm::WarmBinding},
    stats::{ActorRegistry, TrackedActor},
    store::{Ack, MemoryStore, SharedStore, Store, StoreError, WarmDeltas},
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

/// A memory store whose diff appends become durable one after another, `commit_ms` each (0:
/// at once): a gateway whose store cannot keep up, the overload the limiter must see.
#[derive(Debug, Default)]
struct SlowStore {
    inner: MemoryStore,
    commit_ms: AtomicU64,
    next_free: Mutex<Option<Instant>>,
}

impl Store for SlowStore {
    fn append_diff_with_warm(&self, escrow_id: &str, diff: &Diff, warm: &[WarmBinding]) -> Ack {
        let ack = self.inner.append_diff_with_warm(escrow_id, diff, warm);
        let commit = Duration::from_millis(self.commit_ms.load(Ordering::Relaxed));
        if commit.is_zero() {
            return ack;
        }
        let due = {
            let mut next = self.next_free.lock().unwrap();
            let due = next.map_or(Instant::now(), |n| n.max(Instant::now())) + commit;
            *next = Some(due);
            due
        };
        let (tx, slow) = Ack::channel();
        actix_rt::spawn(async move {
            tokio::time::sleep_until(due).await;
            let _ = tx.send(ack.await);
        });
        slow
    }
    fn load_warm_deltas(&self, escrow_id: &str) -> Result<WarmDeltas, StoreError> {
        self.inner.load_warm_deltas(escrow_id)
    }
    fn load_diffs(&self, escrow_id: &str) -> Result<Vec<Diff>, StoreError> {
        self.inner.load_diffs(escrow_id)
    }
    fn load_diffs_from(&self, escrow_id: &str, from: u64) -> Result<Vec<Diff>, StoreError> {
        self.inner.load_diffs_from(escrow_id, from)
    }
    fn delete_diffs(&self, escrow_id: &str) -> Ack {
        self.inner.delete_diffs(escrow_id)
    }
    fn put(&self, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        self.inner.put(namespace, key, value)
    }
    fn delete(&self, namespace: &str, key: &str) -> Ack {
        self.inner.delete(namespace, key)
    }
    fn get(&self, namespace: &str, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.inner.get(namespace, key)
    }
    fn list(&self, namespace: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        self.inner.list(namespace)
    }
    fn flush(&self) -> Ack {
        self.inner.flush()
    }
}

/// The in-process gateway over `sim` with `store`, escrow "42" of the simulated model registered.
pub(crate) async fn gateway_over(
    sim: &SimNetwork,
    config: &Config,
    store: SharedStore,
    clock: SharedClock,
) -> AppState {
    let log = logging::discard();
    let actors = ActorRegistry::default();
    // One set of actor metrics: the escrows count into what `state.actor_metrics` reads.
    let actor_metrics = ActorMetrics::detached().unwrap();
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
        actors,
        store: store.clone(),
        metrics: HttpMetrics::register(&registry).unwrap(),
        actor_metrics,
        registry,
        clock: clock.clone(),
        log: log.clone(),
    };
    let state = AppState::new(config, parts);
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
    state
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
async fn slow_hosts_leave_the_limit_a_slow_gateway_shrinks_it_and_sheds_are_503_with_retry_after() {
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
    let slow = Arc::new(SlowStore::default());
    let store: SharedStore = slow.clone();
    let state = gateway_over(&sim, &config, store, clock.clone()).await;
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

    let take = || {
        std::mem::replace(
            &mut *seen.borrow_mut(),
            Seen {
                lo: usize::MAX,
                ..Seen::default()
            },
        )
    };
    phase(20).await;
    let low = take();
    eprintln!("hosts 100 ms: {low:?}");
    assert!(low.other.is_empty(), "{:?}", low.other);
    assert!(
        low.hi >= 10,
        "the limit rose from 4 to {} while the gateway kept up",
        low.hi
    );
    assert!(low.ok > 1_000, "{low:?}");
    let risen = limiter.view().limit;

    // The hosts slow down tenfold: their latency is not the gateway's, the limit holds.
    for i in 0..3 {
        sim.set_latency(i, latency(1_000)).unwrap();
    }
    phase(15).await;
    let slow_hosts = take();
    eprintln!("hosts 1 s: {slow_hosts:?}, limiter {:?}", limiter.view());
    assert!(slow_hosts.other.is_empty(), "{:?}", slow_hosts.other);
    assert!(
        slow_hosts.lo >= risen,
        "the limit fell from {risen} to {} when only the hosts slowed down",
        slow_hosts.lo
    );
    // A few sheds at most: the clients' first burst after the step finds the limit below their
    // number (the old signal, time to first byte, shed most of this phase).
    assert!(
        slow_hosts.ok > 200 && slow_hosts.shed * 20 < slow_hosts.ok,
        "{slow_hosts:?}"
    );

    // The gateway's own durable writes slow to one per 100 ms: real overload.
    for i in 0..3 {
        sim.set_latency(i, latency(100)).unwrap();
    }
    let before = limiter.view().limit;
    slow.commit_ms.store(100, Ordering::Relaxed);
    phase(15).await;
    let overloaded = take();
    eprintln!("store 100 ms: {overloaded:?}, limiter {:?}", limiter.view());
    assert!(overloaded.other.is_empty(), "{:?}", overloaded.other);
    assert!(
        overloaded.lo * 2 <= before,
        "the limit fell from {before} to {} when the gateway's writes slowed",
        overloaded.lo
    );
    assert!(overloaded.ok > 0 && overloaded.shed > 0, "{overloaded:?}");
    let view = limiter.view();
    assert!(
        view.shed_queue_full > 0 && view.shed_queue_timeout > 0,
        "{view:?}"
    );
    assert_eq!(
        view.shed_queue_full + view.shed_queue_timeout,
        (low.shed + slow_hosts.shed + overloaded.shed) as u64,
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
