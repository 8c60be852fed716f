//! A cluster of real `devshard-gateway serve` processes on one PostgreSQL schema and one
//! simulated network: distinct replica ids, ports, data directories and advertised URLs, short
//! leases, each process's JSON log (stdout) in a file of its data directory. Helpers read the
//! lease table, wait for the escrows to spread, and check every host against the stored log.

use std::{
    collections::BTreeMap,
    fs::File,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use devshard_gateway::sim::SimNetwork;
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

use crate::{
    child::{free_port, temp_dir, ADMIN_KEY},
    pgdb::TestDb,
};

/// One replica: where it listens and logs, and its process while it runs.
pub struct Replica {
    pub id: String,
    pub url: String,
    port: u16,
    dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

/// The replicas, their database and a connection to read it.
pub struct Cluster {
    pub db: TestDb,
    client: Client,
    pub replicas: Vec<Replica>,
    pub escrows: Vec<String>,
    pub ttl: Duration,
}

impl Cluster {
    /// `n` replicas (not started) on a fresh schema, serving `sim`'s escrows.
    pub async fn new(name: &str, n: usize, sim: &SimNetwork, ttl: Duration) -> Cluster {
        let db = TestDb::new(name);
        let (client, conn) = db.config().connect(NoTls).await.unwrap();
        actix_rt::spawn(conn);
        let replicas = (0..n)
            .map(|i| {
                let port = free_port();
                let dir = temp_dir(&format!("{name}-r{i}"));
                Replica {
                    id: format!("r{i}"),
                    url: format!("http://127.0.0.1:{port}"),
                    port,
                    log: dir.join("gateway.log"),
                    dir,
                    child: None,
                }
            })
            .collect();
        Cluster {
            db,
            client,
            replicas,
            escrows: sim.config().escrow_ids.clone(),
            ttl,
        }
    }

    /// Starts replica `i` (again: same id, port and data directory) and waits for `/readyz`.
    pub async fn start(&mut self, i: usize, sim: &SimNetwork) {
        let (url, ttl) = (self.db.url(), self.ttl.as_millis().to_string());
        let r = &mut self.replicas[i];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&r.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_devshard-gateway"))
            .arg("serve")
            .env_clear()
            .env("DEVSHARD_LISTEN", format!("127.0.0.1:{}", r.port))
            .env("DEVSHARD_DATA_DIR", &r.dir)
            .env("DEVSHARD_PRIVATE_KEY", sim.gateway_key().secret_hex())
            .env("DEVSHARD_CHAIN_REST_URL", sim.chain_url())
            .env("DEVSHARD_PUBLIC_API_URL", sim.chain_url())
            .env("DEVSHARD_ESCROWS", self.escrows.join(","))
            .env("DEVSHARD_ADMIN_API_KEY", ADMIN_KEY)
            .env("DEVSHARD_LOG_LEVEL", "info")
            .env("DEVSHARD_WORKERS", "2")
            .env("DEVSHARD_DATABASE_URL", url)
            .env("DEVSHARD_REPLICA_ID", &r.id)
            .env("DEVSHARD_ADVERTISE_URL", &r.url)
            .env("DEVSHARD_LEASE_TTL_MS", ttl)
            .stdout(Stdio::from(log))
            .stderr(Stdio::inherit())
            .spawn()
            .expect("gateway binary starts");
        r.child = Some(child);
        let ready = format!("{}/readyz", r.url);
        poll(
            Duration::from_secs(20),
            &format!("{} ready", r.id),
            || async {
                let client = awc::Client::default();
                matches!(client.get(&ready).send().await, Ok(resp) if resp.status().is_success())
            },
        )
        .await;
    }

    /// SIGKILL replica `i` and reap it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.replicas[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to replica `i`.
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.replicas[i].child.as_ref().unwrap().id();
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// Index of a replica by id.
    pub fn index(&self, id: &str) -> usize {
        self.replicas.iter().position(|r| r.id == id).unwrap()
    }

    /// Escrow → owner of every unexpired lease, by the database's clock.
    pub async fn owners(&self) -> BTreeMap<String, String> {
        let rows = self
            .client
            .query(
                // Duty leases (`__rotation`, `__ledger`) are not escrows.
                "SELECT escrow_id, owner FROM escrow_leases \
                 WHERE expires_at > now() AND left(escrow_id, 2) <> '__'",
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }

    /// Polls until every escrow is leased to one of `live` and each of them holds `per` escrows
    /// (bounded by `within`); returns how long it took.
    pub async fn wait_spread(&self, live: &[usize], per: usize, within: Duration) -> Duration {
        let ids: Vec<String> = live.iter().map(|i| self.replicas[*i].id.clone()).collect();
        let started = Instant::now();
        let what = format!("{per} escrows on each of {ids:?}");
        poll(within, &what, || async {
            let owners = self.owners().await;
            owners.len() == self.escrows.len()
                && ids
                    .iter()
                    .all(|id| owners.values().filter(|o| *o == id).count() == per)
        })
        .await;
        started.elapsed()
    }

    /// The stored log of `escrow`: `(nonce, post-state root)` in nonce order.
    pub async fn stored_log(&self, escrow: &str) -> Vec<(u64, Vec<u8>)> {
        let rows = self
            .client
            .query(
                "SELECT nonce, post_state_root FROM diffs WHERE escrow_id = $1 ORDER BY nonce",
                &[&escrow],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| (u64::try_from(r.get::<_, i64>(0)).unwrap(), r.get(1)))
            .collect()
    }

    /// Syncs every escrow on its owner and checks: the stored log is contiguous from 1 (no nonce
    /// lost), every host is at the owner's nonce and root, and every host's diff chain is the
    /// stored one, root for root (a single chain: no nonce reused).
    pub async fn check_lockstep(&self, sim: &SimNetwork) {
        let owners = self.owners().await;
        for escrow in &self.escrows {
            let owner = &self.replicas[self.index(&owners[escrow])];
            // A lease just claimed (a handoff that `wait_spread` saw land) may precede the
            // escrow actor's start by a moment: its owner answers 404 or 503 until then.
            let synced =
                admin_post_when_up(&owner.url, &format!("/v1/admin/escrows/{escrow}/sync")).await;
            let nonce = synced["nonce"].as_u64().unwrap();
            let root = synced["state_root"].as_str().unwrap().to_string();
            let log = self.stored_log(escrow).await;
            let nonces: Vec<u64> = log.iter().map(|(n, _)| *n).collect();
            assert_eq!(
                nonces,
                (1..=nonce).collect::<Vec<_>>(),
                "escrow {escrow}: stored log"
            );
            for i in 0..sim.hosts().len() {
                let view = sim.host_view(i, escrow).expect("host session");
                assert_eq!(
                    view.latest_nonce, nonce,
                    "escrow {escrow} host {i}: {synced}"
                );
                assert_eq!(
                    hex::encode(view.state_root),
                    root,
                    "escrow {escrow} host {i}"
                );
                for d in &view.diffs {
                    let stored = &log[usize::try_from(d.nonce).unwrap() - 1];
                    assert_eq!(
                        d.post_state_root, stored.1,
                        "escrow {escrow} host {i}: nonce {} is the stored diff",
                        d.nonce
                    );
                }
            }
        }
    }

    /// The replica holding the live lease of a one-replica duty (`__rotation`, `__ledger`).
    pub async fn duty_owner(&self, duty: &str) -> String {
        let row = self
            .client
            .query_one(
                "SELECT owner FROM escrow_leases WHERE escrow_id = $1 AND expires_at > now()",
                &[&duty],
            )
            .await
            .unwrap();
        row.get(0)
    }

    /// Upserts a record of the shared store (as a replica's write would leave it).
    pub async fn put_record(&self, namespace: &str, key: &str, value: &serde_json::Value) {
        self.client
            .execute(
                "INSERT INTO records (namespace, key, value, updated_ms) VALUES ($1, $2, $3, 0) \
                 ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value",
                &[&namespace, &key, &value.to_string()],
            )
            .await
            .unwrap();
    }

    /// Whether the shared store holds the record.
    pub async fn has_record(&self, namespace: &str, key: &str) -> bool {
        let rows = self
            .client
            .query(
                "SELECT 1 FROM records WHERE namespace = $1 AND key = $2",
                &[&namespace, &key],
            )
            .await
            .unwrap();
        !rows.is_empty()
    }

    /// Replica `i`'s log, one JSON record a line.
    pub fn log_lines(&self, i: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.replicas[i].log).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// Whether replica `i`'s log has a record of `stage` about `escrow`.
    pub fn logged_for(&self, i: usize, stage: &str, escrow: &str) -> bool {
        let (stage, escrow) = (
            format!("\"stage\":\"{stage}\""),
            format!("\"escrow\":\"{escrow}\""),
        );
        self.log_lines(i)
            .iter()
            .any(|l| l.contains(&stage) && l.contains(&escrow))
    }

    /// Whether replica `i`'s log has a record with `"stage":"<stage>"`.
    pub fn logged(&self, i: usize, stage: &str) -> bool {
        let text = std::fs::read_to_string(&self.replicas[i].log).unwrap_or_default();
        text.contains(&format!("\"stage\":\"{stage}\""))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.replicas.len() {
            self.kill9(i);
            if std::thread::panicking() {
                eprintln!("replica {i}'s log kept: {}", self.replicas[i].log.display());
            } else {
                let _ = std::fs::remove_dir_all(&self.replicas[i].dir);
            }
        }
    }
}

/// One streaming chat request; `Err` with the status and body unless it answered 200 and
/// ended with `[DONE]`.
pub async fn chat_detail(url: &str, text: &str) -> Result<(), String> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}],
        "stream": true, "max_tokens": 24});
    let mut resp = client
        .post(format!("{url}/v1/chat/completions"))
        .send_json(&body)
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    let bytes = resp
        .body()
        .limit(16 << 20)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&bytes);
    match resp.status().as_u16() {
        200 if text.contains("[DONE]") => Ok(()),
        status => Err(format!("{status}: {text}")),
    }
}

/// Polls `check` every 20 ms until it holds; panics after `within`.
pub async fn poll<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An admin POST returning JSON (asserts success), tried again while it answers 404 or 503 (an
/// escrow actor starting after its lease was claimed), for at most 10 s.
pub async fn admin_post_when_up(url: &str, path: &str) -> serde_json::Value {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut resp = client
            .post(format!("{url}{path}"))
            .insert_header(("Authorization", format!("Bearer {ADMIN_KEY}")))
            .send()
            .await
            .expect("admin call");
        // 404: not on the owner's board yet; 503: its actor still starting.
        if matches!(resp.status().as_u16(), 404 | 503) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        assert!(resp.status().is_success(), "POST {path}: {}", resp.status());
        return resp.json().limit(16 << 20).await.expect("admin json");
    }
}
