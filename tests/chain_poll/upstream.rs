//! A scripted public API for the poller tests: answers each path from a queue of replies (then a
//! default), logs every request with the shared clock's time, and runs on the current runtime
//! (plain tokio TCP, `Connection: close`), so it works on tokio's paused clock. The simulator's
//! chain API cannot answer 429/503 or hold a phase, which these tests need.
#![allow(dead_code)]

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, UNIX_EPOCH},
};

use devshard_actors::clock::SharedClock;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// One answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn ok(body: impl Into<String>) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: format!("{{\"message\":\"status {status}\"}}"),
        }
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_owned(), value.into()));
        self
    }
}

#[derive(Default)]
struct Script {
    queued: BTreeMap<String, VecDeque<Reply>>,
    default: BTreeMap<String, Reply>,
    log: Vec<(i64, String)>,
}

/// A running scripted server.
#[derive(Clone)]
pub struct Upstream {
    pub url: String,
    clock: SharedClock,
    script: Arc<Mutex<Script>>,
}

impl Upstream {
    pub async fn start(clock: SharedClock) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let up = Upstream {
            url,
            clock,
            script: Arc::default(),
        };
        let server = up.clone();
        actix_rt::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let s = server.clone();
                actix_rt::spawn(async move { s.serve(stream).await });
            }
        });
        up
    }

    /// Answers `path` with `reply` from now on (after any queued replies).
    pub fn set(&self, path: &str, reply: Reply) {
        self.script
            .lock()
            .unwrap()
            .default
            .insert(path.to_owned(), reply);
    }

    /// Answers the next request to `path` with `reply` (in queue order).
    pub fn push(&self, path: &str, reply: Reply) {
        let mut s = self.script.lock().unwrap();
        s.queued
            .entry(path.to_owned())
            .or_default()
            .push_back(reply);
    }

    /// `(at_ms, path)` of every request so far.
    pub fn log(&self) -> Vec<(i64, String)> {
        self.script.lock().unwrap().log.clone()
    }

    /// Times of the requests to `path`.
    pub fn times(&self, path: &str) -> Vec<i64> {
        self.log()
            .into_iter()
            .filter(|(_, p)| p == path)
            .map(|(t, _)| t)
            .collect()
    }

    async fn serve(&self, mut stream: TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 2048];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let head = String::from_utf8_lossy(&buf);
        let path = head
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .split('?')
            .next()
            .unwrap_or("/")
            .to_owned();
        let reply = {
            let mut s = self.script.lock().unwrap();
            s.log.push((self.clock.now_ms(), path.clone()));
            let queued = s.queued.get_mut(&path).and_then(VecDeque::pop_front);
            queued
                .or_else(|| s.default.get(&path).cloned())
                .unwrap_or_else(|| Reply::status(404))
        };
        let mut out = format!(
            "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
            reply.status,
            reply.body.len()
        );
        for (k, v) in &reply.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.push_str(&reply.body);
        let _ = stream.write_all(out.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

/// An `epochs/latest` body. The raw PoC of epoch `epoch` spans heights `poc_start..poc_end`.
pub fn epoch_body(height: u64, phase: &str, epoch: u64, poc_start: u64, poc_end: u64) -> String {
    serde_json::json!({
        "block_height": height,
        "phase": phase,
        "latest_epoch": {"index": epoch, "poc_start_block_height": poc_start},
        "epoch_stages": {"poc_start": poc_start, "poc_validation_end": poc_end,
                         "set_new_validators": poc_end, "next_poc_start": poc_start + 600},
        "active_confirmation_poc_event": null,
    })
    .to_string()
}

/// A participants body: `(address, inference_url, preserved)` for model `m`.
pub fn participants_body(list: &[(&str, &str, bool)]) -> String {
    let ps: Vec<_> = list
        .iter()
        .map(|(addr, url, preserved)| {
            serde_json::json!({
                "index": addr, "inference_url": url, "weight": "10", "models": ["m"],
                "ml_nodes": [{"ml_nodes": [{"node_id": format!("{addr}-n"),
                    "timeslot_allocation": [true, preserved], "poc_weight": 10}]}],
            })
        })
        .collect();
    serde_json::json!({"active_participants": {"participants": ps}}).to_string()
}

/// `Retry-After` / `Date` value of a unix-ms time (whole seconds, rounded up).
pub fn http_date(unix_ms: i64) -> String {
    let secs = u64::try_from(unix_ms).unwrap().div_ceil(1000);
    let t = UNIX_EPOCH + Duration::from_secs(secs);
    awc::http::header::HttpDate::from(t).to_string()
}
