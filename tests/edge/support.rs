//! Shared helpers: a signing key, an escrow whose hosts do not exist, an in-process app over a
//! `MemoryStore`, a fake chain REST server, and request helpers returning (status, headers, JSON).

use std::{collections::BTreeMap, net::TcpListener, sync::Arc};

use actix_web::{
    body::MessageBody,
    dev::{Service, ServiceResponse},
    http::{header::HeaderMap, StatusCode},
    test, web, App, HttpRequest, HttpResponse, HttpServer,
};
use devshard_actors::{
    clock::SystemClock,
    directory::{AddEscrow, Directory, DirectoryDeps, GetEscrow, RestartBudget},
    escrow::{
        info::DEFAULT_ROUTE_PREFIX,
        messages::{EscrowSnapshot, GetSnapshot},
        EscrowConfig, EscrowInfo, HostEndpoint,
    },
    protocol::{
        crypto::SigningKey,
        state::{SessionConfig, Slot},
    },
    stats::{ActorRegistry, TrackedActor, TrackedAddr},
    store::{MemoryStore, SharedStore},
};
use devshard_gateway::{
    config::{Config, RawConfig, Secret},
    logging,
    metrics::{self, HttpMetrics},
    state::{AppState, StateParts},
};
use serde_json::Value;

pub const MODEL: &str = "Qwen/Test-Model";
pub const ESCROW: &str = "42";
/// Body limit of the test gateway (small, so the 413 test stays cheap).
pub const BODY_LIMIT: usize = 4_096;
/// Nothing listens on the discard port: hosts of the test escrow refuse connections.
pub const DEAD_HOST: &str = "http://127.0.0.1:9";

pub fn key() -> SigningKey {
    SigningKey::derive("edge-tests", 0)
}

pub fn host_key(i: u32) -> SigningKey {
    SigningKey::derive("edge-tests-host", i)
}

/// An escrow created by [`key`] with three hosts that do not exist.
pub fn escrow_info(id: &str, model: &str) -> EscrowInfo {
    let hosts: Vec<HostEndpoint> = (0..3)
        .map(|i| HostEndpoint {
            address: host_key(i).address().clone(),
            base_url: DEAD_HOST.to_string(),
            slots: vec![i],
            weight: 10,
        })
        .collect();
    EscrowInfo {
        escrow_id: id.to_string(),
        creator: key().address().clone(),
        model: model.to_string(),
        amount: 100_000_000,
        config: SessionConfig::default_for_group(3),
        group: hosts
            .iter()
            .map(|h| Slot {
                slot_id: h.slots[0],
                validator: h.address.clone(),
            })
            .collect(),
        hosts,
        max_nonce: 20_000,
        route_prefix: DEFAULT_ROUTE_PREFIX.to_string(),
    }
}

/// Knobs of [`gateway`].
#[derive(Default)]
pub struct Opts {
    pub admin: Option<&'static str>,
    pub api_keys: Vec<&'static str>,
    pub escrows: Vec<EscrowInfo>,
    pub chain_rest_url: Option<String>,
    pub default_model: Option<&'static str>,
    pub max_concurrent_races: Option<usize>,
}

pub fn config(opts: &Opts) -> Config {
    let raw = RawConfig {
        private_key: Some(Secret::new(key().secret_hex())),
        admin_api_key: opts.admin.map(Secret::new),
        api_keys: opts.api_keys.iter().map(|k| Secret::new(*k)).collect(),
        max_body_bytes: BODY_LIMIT,
        chain_rest_url: opts
            .chain_rest_url
            .clone()
            .unwrap_or_else(|| DEAD_HOST.to_string()),
        chain_timeout_ms: 2_000,
        default_model: opts.default_model.unwrap_or_default().to_string(),
        max_concurrent_races: opts.max_concurrent_races.unwrap_or(16),
        ..RawConfig::default()
    };
    Config::from_raw(raw).unwrap()
}

/// An app state over a fresh memory store, with `opts.escrows` registered.
pub async fn gateway(opts: Opts) -> AppState {
    let config = config(&opts);
    let store: SharedStore = Arc::new(MemoryStore::new());
    let log = logging::discard();
    let actors = ActorRegistry::default();
    let directory = Directory::new(DirectoryDeps {
        key: config.key.clone(),
        store: store.clone(),
        clock: Arc::new(SystemClock),
        log: log.clone(),
        escrow_cfg: EscrowConfig::default(),
        budget: RestartBudget::default(),
        fault_injection: false,
        metrics: devshard_actors::metrics::ActorMetrics::detached().unwrap(),
        actors: actors.clone(),
        warm: devshard_actors::protocol::warm::WarmKeyChecker::rest(
            &config.chain.rest_url,
            Arc::new(SystemClock),
            devshard_actors::protocol::warm::WarmKeyMetrics::detached().unwrap(),
            log.clone(),
        ),
    });
    let board = directory.board();
    let directory = directory.start_tracked();
    for info in &opts.escrows {
        directory
            .send(AddEscrow {
                info: info.clone(),
                key: None,
            })
            .await
            .unwrap()
            .unwrap();
    }
    let registry = metrics::new_registry().unwrap();
    let http_metrics = HttpMetrics::register(&registry).unwrap();
    AppState::new(
        &config,
        StateParts {
            board,
            actor_metrics: devshard_actors::metrics::ActorMetrics::detached().unwrap(),
            directory,
            actors,
            store,
            metrics: http_metrics,
            registry,
            clock: Arc::new(SystemClock),
            log,
        },
    )
}

/// Snapshot of a registered escrow's actor.
pub async fn snapshot(directory: &TrackedAddr<Directory>, id: &str) -> EscrowSnapshot {
    let addr = directory
        .send(GetEscrow {
            escrow_id: id.to_string(),
        })
        .await
        .unwrap()
        .expect("escrow actor alive");
    addr.send(GetSnapshot).await.unwrap()
}

/// Sends a request and returns (status, headers, body as JSON or Null).
pub async fn call<S, R, B>(app: &S, req: R) -> (StatusCode, HeaderMap, Value)
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let res = test::call_service(app, req).await;
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = test::read_body(res).await;
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, body)
}

/// Sends a request and returns (status, headers, body text).
pub async fn call_text<S, R, B>(app: &S, req: R) -> (StatusCode, HeaderMap, String)
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let res = test::call_service(app, req).await;
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = test::read_body(res).await;
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// Asserts the OpenAI error shape and returns (type, code, param).
pub fn error_fields(body: &Value) -> (String, String, Value) {
    let e = body
        .get("error")
        .unwrap_or_else(|| panic!("no error object in {body}"));
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e.get("param").is_some(), "param key missing: {body}");
    (
        e["type"].as_str().unwrap().to_string(),
        e["code"].as_str().unwrap().to_string(),
        e["param"].clone(),
    )
}

/// A fake chain REST server answering `GET path` with canned JSON (404 otherwise).
pub fn fake_chain(routes: BTreeMap<String, Value>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = web::Data::new(routes);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(routes.clone())
            .default_service(web::to(answer))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    format!("http://{addr}")
}

async fn answer(req: HttpRequest, routes: web::Data<BTreeMap<String, Value>>) -> HttpResponse {
    match routes.get(req.path()) {
        Some(v) => HttpResponse::Ok().json(v),
        None => {
            HttpResponse::NotFound().json(serde_json::json!({"code": 5, "message": "Not Found"}))
        }
    }
}

/// Canned chain answers for escrow `id` created by `creator` with the three test hosts.
pub fn chain_routes(id: &str, creator: &str, host_url: &str) -> BTreeMap<String, Value> {
    let prefix = "/productscience/inference/inference";
    let slots: Vec<String> = (0..3).map(|i| host_key(i).address().to_string()).collect();
    let mut routes = BTreeMap::new();
    routes.insert(
        format!("{prefix}/devshard_escrow/{id}"),
        serde_json::json!({"found": true, "escrow": {
            "id": id, "creator": creator, "amount": "100000000", "slots": slots,
            "epoch_index": "7", "app_hash": "AB", "settled": false, "token_price": "2",
            "create_devshard_fee": "0", "fee_per_nonce": 500,
            "inference_seal_grace_nonces": "0", "inference_seal_grace_seconds": "0",
            "auto_seal_every_n_nonces": "0"
        }}),
    );
    for (i, s) in slots.iter().enumerate() {
        routes.insert(
            format!("{prefix}/participant/{s}"),
            serde_json::json!({"participant": {"index": s, "address": s,
                "inference_url": format!("{host_url}/"), "weight": format!("{}", 10 + i)}}),
        );
    }
    routes.insert(
        format!("{prefix}/params"),
        serde_json::json!({"params": {"devshard_escrow_params": {
            "refusal_timeout": "90", "execution_timeout": "0", "validation_rate": "2500",
            "vote_threshold_factor": "0"}}}),
    );
    routes
}
