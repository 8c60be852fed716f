//! A minimal signed devshard client for the simulator tests: a local state machine that
//! composes and signs diffs as the gateway would, requests signed with the gateway key, awc for
//! HTTP and the protocol's `SseParser` for the answers.

use std::time::Duration;

use awc::{error::SendRequestError, Client, ClientResponse};
use futures::StreamExt;

use devshard_actors::{
    clock::TokioClock,
    protocol::{
        auth::{sign_request, HEADER_SIGNATURE, HEADER_TIMESTAMP},
        canonical::prompt_hash,
        crypto::SigningKey,
        diff::Diff,
        proto::{DevshardTx, MsgConfirmStart, MsgStartInference, Tx},
        sse::{HostEvent, SseParser},
        state::StateMachine,
        wire::{DiffJson, InferenceRequest, PayloadJson, ReceiptBody},
    },
};
use devshard_gateway::sim::{Profile, SimConfig, SimNetwork};

/// Unix time the tests' clock starts at.
pub const T0_MS: i64 = 1_700_000_000_000;

/// A config for tests: `hosts` hosts without added latency, 5-token answers.
pub fn config(hosts: usize) -> SimConfig {
    let mut cfg = SimConfig::with_seed("sim-tests");
    cfg.hosts = hosts;
    cfg.profile = Profile::Zero;
    cfg.output_tokens = 5;
    cfg
}

/// A running network and the clock it shares with the test's client.
pub struct TestNet {
    pub net: SimNetwork,
    pub clock: TokioClock,
}

impl std::ops::Deref for TestNet {
    type Target = SimNetwork;

    fn deref(&self) -> &SimNetwork {
        &self.net
    }
}

/// Starts a network on a `TokioClock` anchored at [`T0_MS`] (follows the paused clock).
pub async fn start(cfg: SimConfig) -> TestNet {
    let clock = TokioClock::anchored_at(T0_MS);
    let net = SimNetwork::start(cfg, clock.clone().shared())
        .await
        .unwrap();
    TestNet { net, clock }
}

/// An HTTP client without request timeouts (virtual time may jump far).
pub fn http() -> Client {
    Client::builder().disable_timeout().finish()
}

/// The gateway side of one escrow session.
pub struct Session {
    pub escrow_id: String,
    pub key: SigningKey,
    pub sm: StateMachine,
    pub diffs: Vec<Diff>,
    /// Base session URL per host.
    pub urls: Vec<String>,
    /// Host index of each slot.
    pub slot_host: Vec<usize>,
    pub model: String,
    pub clock: TokioClock,
    pub client: Client,
}

impl Session {
    pub fn new(net: &TestNet, escrow_id: &str) -> Session {
        let escrow = net.escrow(escrow_id).unwrap();
        let group = escrow
            .slots
            .iter()
            .enumerate()
            .map(|(i, a)| devshard_actors::protocol::state::Slot {
                slot_id: i as u32,
                validator: a.clone(),
            })
            .collect();
        let sm = StateMachine::new(
            escrow_id,
            escrow.session_config.clone(),
            group,
            escrow.amount,
        )
        .unwrap();
        let slot_host = escrow
            .slots
            .iter()
            .map(|a| net.hosts().iter().position(|h| &h.address == a).unwrap())
            .collect();
        Session {
            escrow_id: escrow_id.to_owned(),
            key: net.gateway_key().clone(),
            sm,
            diffs: Vec::new(),
            urls: (0..net.hosts().len())
                .map(|i| net.session_url(i, escrow_id).unwrap())
                .collect(),
            slot_host,
            model: net.config().model.clone(),
            clock: net.clock.clone(),
            client: http(),
        }
    }

    pub fn now(&self) -> i64 {
        use devshard_actors::clock::Clock;
        self.clock.now_unix()
    }

    pub fn next_nonce(&self) -> u64 {
        self.sm.latest_nonce() + 1
    }

    /// Host index executing `nonce`.
    pub fn executor(&self, nonce: u64) -> usize {
        self.slot_host[(nonce % self.slot_host.len() as u64) as usize]
    }

    /// Composes, signs and records the next diff (best effort, as the gateway does).
    pub fn compose(&mut self, txs: Vec<DevshardTx>) -> Diff {
        let nonce = self.next_nonce();
        let out = self.sm.apply_best_effort(nonce, txs).unwrap();
        let diff = Diff::sign(nonce, out.applied, &self.escrow_id, out.root, &self.key);
        self.diffs.push(diff.clone());
        diff
    }

    /// A Start for the next nonce and its payload.
    pub fn start_tx(&self, prompt: &[u8], max_tokens: u64) -> (DevshardTx, PayloadJson) {
        let started_at = self.now();
        let start = MsgStartInference {
            inference_id: self.next_nonce(),
            prompt_hash: prompt_hash(prompt).unwrap().to_vec(),
            model: self.model.clone(),
            input_length: prompt.len() as u64,
            max_tokens,
            started_at,
        };
        let payload = PayloadJson {
            prompt: prompt.to_vec(),
            model: self.model.clone(),
            input_length: prompt.len() as u64,
            max_tokens,
            started_at,
        };
        (DevshardTx::new(Tx::StartInference(start)), payload)
    }

    /// Composes the next diff with `pending` txs and a Start; returns it and the payload.
    pub fn compose_inference(
        &mut self,
        pending: Vec<DevshardTx>,
        prompt: &[u8],
        max_tokens: u64,
    ) -> (Diff, PayloadJson) {
        let (start, payload) = self.start_tx(prompt, max_tokens);
        let mut txs = pending;
        txs.push(start);
        (self.compose(txs), payload)
    }

    /// Every stored diff with nonce > `after`, in wire form.
    pub fn diffs_after(&self, after: u64) -> Vec<DiffJson> {
        self.diffs
            .iter()
            .filter(|d| d.nonce > after)
            .map(DiffJson::from_diff)
            .collect()
    }

    /// The JSON body of a chat request.
    pub fn body(diffs: Vec<DiffJson>, nonce: u64, payload: Option<PayloadJson>) -> Vec<u8> {
        serde_json::to_vec(&InferenceRequest {
            diffs,
            nonce,
            payload,
            stream: None,
        })
        .unwrap()
    }

    /// POSTs a signed body (gateway key, current time) to `{session url of host}/{action}`.
    pub async fn post(
        &self,
        host: usize,
        action: &str,
        body: Vec<u8>,
    ) -> Result<ClientResponse, SendRequestError> {
        self.post_signed(host, action, body, &self.key.clone(), self.now())
            .await
    }

    pub async fn post_signed(
        &self,
        host: usize,
        action: &str,
        body: Vec<u8>,
        key: &SigningKey,
        ts: i64,
    ) -> Result<ClientResponse, SendRequestError> {
        let auth = sign_request(key, &self.escrow_id, &body, ts as u64);
        self.client
            .post(format!("{}/{action}", self.urls[host]))
            .insert_header((HEADER_SIGNATURE, auth.signature_hex))
            .insert_header((HEADER_TIMESTAMP, auth.timestamp))
            .insert_header(("content-type", "application/json"))
            .send_body(body)
            .await
    }

    /// GET `{session url of host}/{path}` as JSON.
    pub async fn get(&self, host: usize, path: &str) -> (u16, serde_json::Value) {
        let mut resp = self
            .client
            .get(format!("{}/{path}", self.urls[host]))
            .send()
            .await
            .unwrap();
        let body = resp.body().await.unwrap();
        (
            resp.status().as_u16(),
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Sends the next inference to its executor with catch-up from `synced` and reads it all.
    pub async fn infer(&mut self, pending: Vec<DevshardTx>, prompt: &[u8]) -> (u64, Streamed) {
        let (diff, payload) = self.compose_inference(pending, prompt, 16);
        let host = self.executor(diff.nonce);
        let body = Session::body(self.diffs_after(0), diff.nonce, Some(payload));
        let resp = self.post(host, "chat/completions", body).await.unwrap();
        (diff.nonce, read_stream(resp).await)
    }

    /// The ConfirmStart the gateway builds from a receipt.
    pub fn confirm_from(receipt: &ReceiptBody, inference_id: u64) -> DevshardTx {
        DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
            inference_id,
            executor_sig: receipt.receipt.clone().unwrap(),
            confirmed_at: receipt.confirmed_at.unwrap(),
        }))
    }
}

/// How a streamed answer ended.
#[derive(Debug, PartialEq)]
pub enum End {
    /// Clean EOF.
    Eof,
    /// The connection broke mid-body.
    Broken(String),
    /// Nothing for the given wait (the host went silent).
    Silent,
}

/// A parsed host answer.
#[derive(Debug)]
pub struct Streamed {
    pub status: u16,
    pub headers: awc::http::header::HeaderMap,
    pub content_type: String,
    pub events: Vec<HostEvent>,
    pub end: End,
    pub raw: Vec<u8>,
}

impl Streamed {
    pub fn receipt(&self) -> Option<&ReceiptBody> {
        self.events.iter().find_map(|e| match e {
            HostEvent::Receipt(r) => Some(r),
            _ => None,
        })
    }

    pub fn meta(&self) -> Option<&Vec<DevshardTx>> {
        self.events.iter().find_map(|e| match e {
            HostEvent::Meta(m) => Some(m),
            _ => None,
        })
    }

    pub fn chunks(&self) -> Vec<serde_json::Value> {
        self.events
            .iter()
            .filter_map(|e| match e {
                HostEvent::Chunk(b) => Some(serde_json::from_slice(b).unwrap()),
                _ => None,
            })
            .collect()
    }

    pub fn has_done(&self) -> bool {
        self.events.contains(&HostEvent::Done)
    }

    /// The streamed answer text.
    pub fn text(&self) -> String {
        self.chunks()
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }

    pub fn body_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.raw).unwrap_or(serde_json::Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn message(&self) -> String {
        self.body_json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// Reads a whole answer, waiting at most one hour of (virtual) time between chunks.
pub async fn read_stream(resp: ClientResponse) -> Streamed {
    read_stream_with(resp, Duration::from_secs(3600)).await
}

pub async fn read_stream_with(mut resp: ClientResponse, idle: Duration) -> Streamed {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut raw = Vec::new();
    let end = loop {
        match tokio::time::timeout(idle, resp.next()).await {
            Err(_) => break End::Silent,
            Ok(None) => break End::Eof,
            Ok(Some(Err(e))) => break End::Broken(e.to_string()),
            Ok(Some(Ok(bytes))) => {
                raw.extend_from_slice(&bytes);
                if content_type.starts_with("text/event-stream") {
                    events.extend(parser.push(&bytes));
                }
            }
        }
    };
    events.extend(parser.flush());
    Streamed {
        status,
        headers,
        content_type,
        events,
        end,
        raw,
    }
}

/// Times of each event's arrival, relative to `since` (virtual time).
pub async fn event_times(
    mut resp: ClientResponse,
    since: tokio::time::Instant,
) -> Vec<(Duration, HostEvent)> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    while let Some(Ok(bytes)) = resp.next().await {
        let at = since.elapsed();
        out.extend(parser.push(&bytes).into_iter().map(|e| (at, e)));
    }
    out
}

/// A control-API call (`/sim/…` on the chain port): status and JSON body.
pub async fn control_call(
    net: &TestNet,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let client = http();
    let url = format!("{}{path}", net.control_url());
    let req = match method {
        "GET" => client.get(url),
        "PUT" => client.put(url),
        "DELETE" => client.delete(url),
        _ => client.post(url),
    };
    let mut resp = match body {
        Some(b) => req.send_json(&b).await.unwrap(),
        None => req.send().await.unwrap(),
    };
    let bytes = resp.body().await.unwrap();
    (
        resp.status().as_u16(),
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}
