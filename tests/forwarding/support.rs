//! Two replicas on one fresh PostgreSQL schema and one simulated network: replica `a` owns
//! escrow 42, replica `b` owns escrow 43 (both serve the simulated network's one model).

use std::time::Duration;

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{SimConfig, SimNetwork};

use super::{
    child::{free_port, temp_dir, Gateway, ADMIN_KEY},
    pgdb::TestDb,
};

/// The replicas first (killed before the schema is dropped), then the network and the schema.
pub struct Pair {
    pub a: Gateway,
    pub b: Gateway,
    pub sim: SimNetwork,
    pub db: TestDb,
}

pub const REPLICA_A: &str = "replica-a";
pub const REPLICA_B: &str = "replica-b";

async fn replica(sim: &SimNetwork, db: &TestDb, id: &str, escrow: &str) -> Gateway {
    let port = free_port();
    let env = [
        ("DEVSHARD_DATABASE_URL", db.url()),
        ("DEVSHARD_REPLICA_ID", id.to_string()),
        ("DEVSHARD_ADVERTISE_URL", format!("http://127.0.0.1:{port}")),
    ];
    Gateway::start_with_env(sim, &temp_dir(id), port, &[escrow], &env).await
}

/// `a` (escrow 42) started and ready, then `b` (escrow 43).
pub async fn two_replicas(name: &str) -> Pair {
    let mut cfg = SimConfig::with_seed(name);
    cfg.hosts = 3;
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    cfg.output_tokens = 8;
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let db = TestDb::new(name);
    let a = replica(&sim, &db, REPLICA_A, "42").await;
    let b = replica(&sim, &db, REPLICA_B, "43").await;
    Pair { a, b, sim, db }
}

/// An answer with its status, headers of interest and whole body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub replica: Option<String>,
    pub escrow: Option<String>,
    pub retry_after: Option<String>,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

fn header(resp: &awc::ClientResponse<impl Sized>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Sends `method path` with an optional JSON body and extra headers; admin key unless the
/// headers carry their own `Authorization`.
pub async fn call(
    url: &str,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    headers: &[(&str, &str)],
) -> Answer {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let method = awc::http::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client
        .request(method, format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN_KEY}")));
    for (k, v) in headers {
        req = req.insert_header((*k, *v));
    }
    let sent = match body {
        Some(b) => req.send_json(&b).await,
        None => req.send().await,
    };
    let mut resp = sent.expect("the replica answers");
    let body = resp.body().limit(16 << 20).await.unwrap().to_vec();
    Answer {
        status: resp.status().as_u16(),
        replica: header(&resp, "x-devshard-replica"),
        escrow: header(&resp, "x-devshard-escrow"),
        retry_after: header(&resp, "retry-after"),
        content_type: header(&resp, "content-type").unwrap_or_default(),
        body,
    }
}

/// A chat request (`stream` or not) with extra headers.
pub async fn chat(url: &str, text: &str, stream: bool, headers: &[(&str, &str)]) -> Answer {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        "max_tokens": 16,
    });
    call(url, "POST", "/v1/chat/completions", Some(body), headers).await
}
