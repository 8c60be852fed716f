//! Runs the gateway binary as a child process and talks to it over HTTP.
#![allow(dead_code)] // shared helpers; not every test uses every one

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use devshard_gateway::sim::SimNetwork;

pub const ADMIN_KEY: &str = "test-admin-key";

/// A running gateway child process.
pub struct Gateway {
    pub child: Child,
    pub url: String,
}

/// A free loopback port (bound, then released for the child).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty data directory.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "devshard-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Gateway {
    /// Starts `devshard-gateway serve` configured by environment against `sim`.
    pub async fn start(sim: &SimNetwork, data_dir: &Path, port: u16, escrows: &[&str]) -> Gateway {
        Gateway::start_with_env(sim, data_dir, port, escrows, &[]).await
    }

    /// [`Gateway::start`] with more environment (e.g. `DEVSHARD_DATABASE_URL`).
    pub async fn start_with_env(
        sim: &SimNetwork,
        data_dir: &Path,
        port: u16,
        escrows: &[&str],
        env: &[(&str, String)],
    ) -> Gateway {
        let child = Command::new(env!("CARGO_BIN_EXE_devshard-gateway"))
            .arg("serve")
            .env_clear()
            .env("DEVSHARD_LISTEN", format!("127.0.0.1:{port}"))
            .env("DEVSHARD_DATA_DIR", data_dir)
            .env("DEVSHARD_PRIVATE_KEY", sim.gateway_key().secret_hex())
            .env("DEVSHARD_CHAIN_REST_URL", sim.chain_url())
            .env("DEVSHARD_PUBLIC_API_URL", sim.chain_url())
            .env("DEVSHARD_ESCROWS", escrows.join(","))
            .env("DEVSHARD_ADMIN_API_KEY", ADMIN_KEY)
            .env("DEVSHARD_LOG_LEVEL", "warning")
            .env("DEVSHARD_WORKERS", "2")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("gateway binary starts");
        let gw = Gateway {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        gw.wait_ready().await;
        gw
    }

    /// Polls `/readyz` until the gateway serves (bounded).
    async fn wait_ready(&self) {
        let client = awc::Client::default();
        for _ in 0..400 {
            if let Ok(r) = client.get(format!("{}/readyz", self.url)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("gateway at {} never became ready", self.url);
    }

    /// SIGKILL (std's `Child::kill` sends SIGKILL on unix), then reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// One chat request; `Ok(body)` on 200 (the whole SSE or JSON body), `Err(status)` otherwise.
    pub async fn chat(&self, text: &str, stream: bool) -> Result<Vec<u8>, u16> {
        chat(&self.url, text, stream).await
    }

    /// An admin GET/POST returning JSON.
    pub async fn admin(&self, method: &str, path: &str) -> serde_json::Value {
        let client = awc::Client::builder()
            .timeout(Duration::from_secs(60))
            .finish();
        let url = format!("{}{path}", self.url);
        let req = match method {
            "POST" => client.post(url),
            _ => client.get(url),
        }
        .insert_header(("Authorization", format!("Bearer {ADMIN_KEY}")));
        let mut resp = req.send().await.expect("admin call");
        assert!(
            resp.status().is_success(),
            "{method} {path}: {}",
            resp.status()
        );
        resp.json().limit(16 << 20).await.expect("admin json")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One chat request to a gateway URL; `Ok(body)` on 200, `Err(status)` otherwise (0 = no answer).
pub async fn chat(url: &str, text: &str, stream: bool) -> Result<Vec<u8>, u16> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}], "stream": stream, "max_tokens": 24});
    let mut resp = match client
        .post(format!("{url}/v1/chat/completions"))
        .send_json(&body)
        .await
    {
        Ok(r) => r,
        Err(_) => return Err(0),
    };
    let status = resp.status().as_u16();
    let bytes = resp.body().limit(16 << 20).await.map_err(|_| 0u16)?;
    if status == 200 {
        Ok(bytes.to_vec())
    } else {
        Err(status)
    }
}

/// Progress counters shared by concurrent requests (single-threaded test runtime).
#[derive(Default, Clone)]
pub struct Progress {
    pub headers: std::rc::Rc<std::cell::Cell<usize>>,
    pub done: std::rc::Rc<std::cell::Cell<usize>>,
}

/// A streaming chat request that counts when its response headers and its end arrive.
pub async fn chat_counted(url: &str, text: &str, progress: Progress) -> Result<Vec<u8>, u16> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let body = serde_json::json!({"messages": [{"role": "user", "content": text}], "stream": true, "max_tokens": 24});
    let mut resp = match client
        .post(format!("{url}/v1/chat/completions"))
        .send_json(&body)
        .await
    {
        Ok(r) => r,
        Err(_) => return Err(0),
    };
    progress.headers.set(progress.headers.get() + 1);
    let status = resp.status().as_u16();
    let bytes = resp.body().limit(16 << 20).await.map_err(|_| 0u16)?;
    progress.done.set(progress.done.get() + 1);
    if status == 200 {
        Ok(bytes.to_vec())
    } else {
        Err(status)
    }
}
