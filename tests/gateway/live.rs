//! The real gateway over HTTP (in-process server, real sockets, SQLite store in a temp dir)
//! against the simulated network, for the operator-surface tests (debug listing, request
//! accounting, load) and the HTTP-edge tests. Also compiled into `tests/edge.rs`.
#![allow(dead_code)] // shared by several test modules; not each uses every helper

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use devshard_actors::clock::TokioClock;
use devshard_gateway::{
    app::{self, RunningGateway, StartOptions},
    config::Config,
    logging,
    sim::{Profile, SimConfig, SimNetwork},
};
use serde_json::Value;

/// The admin key of [`start`].
pub const ADMIN: &str = "k";

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A running simulator and gateway.
pub struct Live {
    pub sim: SimNetwork,
    pub gw: RunningGateway,
    dir: std::path::PathBuf,
    clock: devshard_actors::clock::SharedClock,
}

impl Live {
    pub fn url(&self) -> &str {
        &self.gw.url
    }

    /// Stops the gateway at once (open streams are cut) and removes its data.
    pub async fn stop(self) {
        self.gw.stop(false).await.unwrap();
        let _ = std::fs::remove_dir_all(self.dir);
    }
}

/// Starts `hosts` simulated hosts (zero latency) and a gateway serving escrow 42 with the chain
/// poller on, `env` added to its environment and `tweak` applied to the loaded configuration.
pub async fn start(
    seed: &str,
    hosts: usize,
    env: &[(&str, &str)],
    tweak: impl FnOnce(&mut Config),
) -> Live {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = hosts;
    cfg.profile = Profile::Zero;
    start_with(cfg, env, tweak).await
}

/// [`start`] with a simulator configured by the caller (latency profile, …).
pub async fn start_with(
    cfg: SimConfig,
    env: &[(&str, &str)],
    tweak: impl FnOnce(&mut Config),
) -> Live {
    let seed = cfg.seed.clone();
    let clock = TokioClock::new().shared();
    let sim = SimNetwork::start(cfg, clock.clone()).await.unwrap();
    let dir = std::env::temp_dir().join(format!(
        "devshard-live-{seed}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut vars = base_vars(&sim, &dir);
    for (k, v) in env {
        vars.insert((*k).to_string(), (*v).to_string());
    }
    let gw = start_gateway(&vars, clock.clone(), tweak).await;
    Live {
        sim,
        gw,
        dir,
        clock,
    }
}

async fn start_gateway(
    vars: &BTreeMap<String, String>,
    clock: devshard_actors::clock::SharedClock,
    tweak: impl FnOnce(&mut Config),
) -> RunningGateway {
    let mut config = Config::load(None, vars).unwrap();
    tweak(&mut config);
    let opts = StartOptions {
        registry: None,
        clock: Some(clock),
    };
    app::start_with(config, logging::discard(), opts)
        .await
        .unwrap()
}

impl Live {
    /// Stops the gateway and starts a new one on the same data directory and simulator, with
    /// `env` overriding [`start`]'s environment (a rotated key, …).
    pub async fn restart(self, env: &[(&str, &str)]) -> Live {
        let Live {
            sim,
            gw,
            dir,
            clock,
        } = self;
        gw.stop(false).await.unwrap();
        let mut vars = base_vars(&sim, &dir);
        for (k, v) in env {
            vars.insert((*k).to_string(), (*v).to_string());
        }
        let gw = start_gateway(&vars, clock.clone(), |_| {}).await;
        Live {
            sim,
            gw,
            dir,
            clock,
        }
    }
}

impl Live {
    /// Stops this gateway and starts another on the same simulated network with an empty data
    /// directory and no configured escrow (a migration to a new gateway), `env` overriding
    /// [`start`]'s environment. The old data directory is removed.
    pub async fn successor(self, env: &[(&str, &str)]) -> Live {
        let Live {
            sim,
            gw,
            dir,
            clock,
        } = self;
        gw.stop(false).await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let dir = dir.with_extension("successor");
        let mut vars = base_vars(&sim, &dir);
        vars.remove("DEVSHARD_ESCROWS");
        for (k, v) in env {
            vars.insert((*k).to_string(), (*v).to_string());
        }
        let gw = start_gateway(&vars, clock.clone(), |c| c.escrows.clear()).await;
        Live {
            sim,
            gw,
            dir,
            clock,
        }
    }
}

impl Live {
    /// Starts another gateway on the same simulated network with its own data directory, `env`
    /// overriding [`start`]'s environment (another replica on a shared PostgreSQL database).
    pub async fn replica(&self, env: &[(&str, &str)]) -> RunningGateway {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.with_extension(format!("replica-{n}"));
        let mut vars = base_vars(&self.sim, &dir);
        for (k, v) in env {
            vars.insert((*k).to_string(), (*v).to_string());
        }
        start_gateway(&vars, self.clock.clone(), |_| {}).await
    }
}

fn base_vars(sim: &SimNetwork, dir: &std::path::Path) -> BTreeMap<String, String> {
    [
        ("DEVSHARD_LISTEN", "127.0.0.1:0".to_string()),
        ("DEVSHARD_DATA_DIR", dir.display().to_string()),
        ("DEVSHARD_PRIVATE_KEY", sim.gateway_key().secret_hex()),
        ("DEVSHARD_CHAIN_REST_URL", sim.chain_url().to_string()),
        ("DEVSHARD_PUBLIC_API_URL", sim.chain_url().to_string()),
        ("DEVSHARD_ESCROWS", "42".to_string()),
        ("DEVSHARD_ADMIN_API_KEY", ADMIN.to_string()),
        ("DEVSHARD_WORKERS", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// An HTTP client allowing `connections` simultaneous connections.
pub fn client(connections: usize) -> awc::Client {
    awc::Client::builder()
        .connector(awc::Connector::new().limit(connections))
        .timeout(Duration::from_secs(120))
        .finish()
}

/// `POST /v1/chat/completions` → (status, headers, whole body).
pub async fn chat(url: &str, body: &str) -> (u16, awc::http::header::HeaderMap, Vec<u8>) {
    let mut resp = client(8)
        .post(format!("{url}/v1/chat/completions"))
        .insert_header(("Content-Type", "application/json"))
        .send_body(body.to_string())
        .await
        .unwrap();
    let headers = resp.headers().clone();
    let bytes = resp.body().limit(16 << 20).await.unwrap();
    (resp.status().as_u16(), headers, bytes.to_vec())
}

/// `GET path` with the admin key → (status, JSON body).
pub async fn admin_get(url: &str, path: &str) -> (u16, Value) {
    let mut resp = client(8)
        .get(format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (
        status,
        resp.json().limit(64 << 20).await.unwrap_or(Value::Null),
    )
}

/// `POST path` with the admin key and a JSON `body` → (status, JSON body).
pub async fn admin_post(url: &str, path: &str, body: &str) -> (u16, Value) {
    let mut resp = client(4)
        .post(format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .insert_header(("Content-Type", "application/json"))
        .send_body(body.to_string())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// The entries of `GET /v1/debug/actors` (with `query`, e.g. `?kind=race`).
pub async fn actors(url: &str, query: &str) -> Vec<Value> {
    let (status, body) = admin_get(url, &format!("/v1/debug/actors{query}")).await;
    assert_eq!(status, 200, "{body}");
    body["data"].as_array().cloned().unwrap_or_default()
}

/// The escrow actor's current nonce.
pub async fn escrow_nonce(url: &str) -> u64 {
    let (_, v) = admin_get(url, "/v1/admin/escrows/42").await;
    v["snapshot"]["nonce"].as_u64().unwrap()
}

/// The request id of an answer.
pub fn request_id(headers: &awc::http::header::HeaderMap) -> String {
    headers
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// `GET /metrics` → (status, Prometheus text).
pub async fn metrics(url: &str) -> (u16, String) {
    let mut resp = client(2)
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap();
    let body = resp.body().limit(16 << 20).await.unwrap();
    (
        resp.status().as_u16(),
        String::from_utf8_lossy(&body).into_owned(),
    )
}
