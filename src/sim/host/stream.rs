//! The SSE answer of `chat/completions` after the receipt (docs/protocol.md §3.2 step 5).
//!
//! Event order: `devshard_receipt` → (executor with payload) inference data → `[DONE]` →
//! `devshard_meta` with the host's whole mempool, which then includes the signed
//! `MsgFinishInference`. Without execution: receipt then meta. The headers leave together with
//! the receipt (after `receipt_ms`, any `stall_before_receipt_ms` and RTT/2).
//!
//! `response_hash` = `sha256` of the inference data payloads (the JSON after `data: `, without
//! `[DONE]`) concatenated in stream order; for a non-streaming prompt that is the single
//! `chat.completion` body. If the client goes away before `[DONE]` the run is abandoned: no
//! finish is recorded (the record stays Started until an execution timeout), as upstream
//! cancels the ML request with the request context.

use std::{io, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use hyper::body::Frame;

use devshard_actors::protocol::{
    crypto::sha256,
    proto::{DevshardTx, MsgFinalizeRound, MsgFinishInference, MsgStartInference, Tx},
    sse::{data_event, meta_event, receipt_event},
    state::sign_finish,
    wire::ReceiptBody,
};

use super::HostState;
use crate::sim::{
    faults::Faults,
    generator::{Generation, PromptInfo},
    network::NetCore,
    profile::LatencyProfile,
    server::{self, BodySender, Resp},
};

/// What to write after the receipt.
#[derive(Debug)]
pub(crate) struct Plan {
    pub escrow_id: String,
    pub incarnation: u64,
    pub receipt: ReceiptBody,
    pub exec: Option<ExecPlan>,
}

/// The executor's work for this request.
#[derive(Debug)]
pub(crate) struct ExecPlan {
    pub inference_id: u64,
    pub executor_slot: u32,
    pub prompt: Vec<u8>,
    pub max_tokens: u64,
    pub receipt: Vec<u8>,
    pub confirmed_at: i64,
    pub mode: ExecMode,
}

#[derive(Debug)]
pub(crate) enum ExecMode {
    /// First request for this inference: run it.
    New,
    /// Another request is running it: receipt, no execution.
    AlreadyRunning,
    /// Finished earlier: replay the cached data payloads.
    Replay(Vec<String>),
}

const DONE: &str = "[DONE]";
/// What `garble_meta` sends: a meta event whose mempool entry is not base64.
const GARBLED_META: &str = r#"{"devshard_meta":{"mempool":["!garbled!"]}}"#;

/// Waits for the receipt time, then answers 200 SSE and streams the rest from a task.
pub(crate) async fn respond(
    core: Arc<NetCore>,
    host: Arc<HostState>,
    plan: Plan,
    faults: Faults,
    latency: LatencyProfile,
) -> Resp {
    // If the client leaves before the receipt, hyper drops this future: forget the run.
    let guard = AbandonOnDrop {
        host: Arc::clone(&host),
        plan: Some(plan),
    };
    host.delay(Duration::from_millis(latency.receipt_ms)).await;
    if let Some(ms) = faults.stall_before_receipt_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    host.delay(latency.half_rtt()).await;
    let Some(plan) = guard.disarm() else {
        return server::message(StatusCode::INTERNAL_SERVER_ERROR, "receipt plan lost");
    };
    let (tx, body) = server::channel_body();
    // The channel is empty, so the receipt always fits.
    let _ = tx.try_send(Ok(Frame::data(receipt_event(&plan.receipt))));
    tokio::spawn(produce(core, host, plan, faults, latency, tx));
    let mut resp = server::response(StatusCode::OK, "text/event-stream", body);
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The client went away.
struct Gone;

async fn send(tx: &BodySender, payload: &str) -> Result<(), Gone> {
    send_bytes(tx, data_event(payload.as_bytes())).await
}

async fn send_bytes(tx: &BodySender, event: Bytes) -> Result<(), Gone> {
    tx.send(Ok(Frame::data(event))).await.map_err(|_| Gone)
}

async fn produce(
    core: Arc<NetCore>,
    host: Arc<HostState>,
    plan: Plan,
    faults: Faults,
    latency: LatencyProfile,
    tx: BodySender,
) {
    if faults.drop_after_receipt {
        let _ = tx
            .send(Err(io::Error::other("simulated connection drop")))
            .await;
        abandon(&host, &plan);
        return;
    }
    let Some(exec) = &plan.exec else {
        let _ = send_meta(&host, &plan, &faults, &tx).await;
        return;
    };
    let result = match &exec.mode {
        ExecMode::AlreadyRunning => send_meta(&host, &plan, &faults, &tx).await,
        ExecMode::Replay(events) => replay(&host, &plan, &faults, &tx, events).await,
        ExecMode::New => run(&core, &host, &plan, exec, &faults, &latency, &tx).await,
    };
    if result.is_err() {
        abandon(&host, &plan);
    }
}

async fn replay(
    host: &Arc<HostState>,
    plan: &Plan,
    faults: &Faults,
    tx: &BodySender,
    events: &[String],
) -> Result<(), Gone> {
    for e in events {
        send(tx, e).await?;
    }
    send(tx, DONE).await?;
    send_meta(host, plan, faults, tx).await
}

async fn run(
    core: &NetCore,
    host: &Arc<HostState>,
    plan: &Plan,
    exec: &ExecPlan,
    faults: &Faults,
    latency: &LatencyProfile,
    tx: &BodySender,
) -> Result<(), Gone> {
    let info = PromptInfo::parse(&exec.prompt);
    let model = info.model.clone().unwrap_or_else(|| core.cfg.model.clone());
    let mut generation = Generation::new(
        &exec.prompt,
        &model,
        exec.max_tokens,
        core.cfg.output_tokens,
        host.now_unix(),
    );
    if faults.empty_stream {
        generation = generation.emptied();
    }
    host.delay(latency.ttft(exec.prompt.len() as u64)).await;
    let straggle = host.straggler_delay();
    if !straggle.is_zero() {
        tokio::time::sleep(straggle).await;
    }
    if let Some(ms) = faults.first_token_delay_ms {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(err) = faults.error_event_json() {
        send(tx, &err.to_string()).await?;
        send(tx, DONE).await?;
        abandon(host, plan);
        return Ok(());
    }
    let mut payloads = Vec::new();
    if info.stream {
        payloads.push(generation.role_chunk());
        send(tx, &generation.role_chunk()).await?;
        for i in 0..generation.token_count() {
            if i > 0 {
                host.delay(latency.inter_token()).await;
            }
            stall_if(faults, i, tx).await?;
            let chunk = generation.content_chunk(i);
            send(tx, &chunk).await?;
            payloads.push(chunk);
        }
        stall_if(faults, generation.token_count(), tx).await?;
        if !faults.empty_stream {
            let last = generation.finish_chunk();
            send(tx, &last).await?;
            payloads.push(last);
        }
    } else {
        let decode = latency.inter_token() * generation.token_count().saturating_sub(1) as u32;
        host.delay(decode).await;
        stall_if(faults, 0, tx).await?;
        let body = generation.completion();
        send(tx, &body).await?;
        payloads.push(body);
    }
    if faults.truncate_before_done {
        abandon(host, plan);
        return Ok(());
    }
    send(tx, DONE).await?;
    let finish = sign_finish(
        MsgFinishInference {
            inference_id: exec.inference_id,
            response_hash: sha256(payloads.concat().as_bytes()).to_vec(),
            input_tokens: generation.prompt_tokens(),
            output_tokens: generation.token_count() as u64,
            executor_slot: exec.executor_slot,
            proposer_sig: Vec::new(),
            escrow_id: plan.escrow_id.clone(),
        },
        host.signer(faults),
    );
    let finish = DevshardTx::new(Tx::FinishInference(finish));
    let late = faults.late_finish_ms;
    let (incarnation, id, sequenced) = (plan.incarnation, exec.inference_id, finish.clone());
    host.on_session(&plan.escrow_id, move |s| {
        if s.incarnation != incarnation {
            return;
        }
        if let Some(e) = s.executions.get_mut(&id) {
            e.cached = Some(payloads);
        }
        if late.is_none() {
            s.add_to_mempool(sequenced);
        }
    })
    .await;
    if let Some(ms) = late.filter(|ms| *ms >= 0) {
        schedule_late_finish(core, host, plan, finish, ms as u64, faults.finish_via_peers);
    }
    send_meta(host, plan, faults, tx).await
}

/// Pauses after `stall_after_chunks` content chunks (`stall_ms`, or until the client leaves).
async fn stall_if(faults: &Faults, sent: usize, tx: &BodySender) -> Result<(), Gone> {
    if faults.stall_after_chunks.map(|k| k as usize) != Some(sent) {
        return Ok(());
    }
    match faults.stall_ms {
        Some(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(())
        }
        None => {
            tx.closed().await;
            Err(Gone)
        }
    }
}

/// Writes the meta event (unless `omit_meta`; undecodable with `garble_meta`).
async fn send_meta(
    host: &Arc<HostState>,
    plan: &Plan,
    faults: &Faults,
    tx: &BodySender,
) -> Result<(), Gone> {
    if faults.omit_meta {
        return Ok(());
    }
    let mut mempool = host
        .on_session(&plan.escrow_id, |s| s.mempool.clone())
        .await
        .unwrap_or_default();
    if faults.inject_foreign_txs {
        mempool.push(DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {})));
        mempool.push(DevshardTx::new(Tx::StartInference(MsgStartInference {
            inference_id: u64::MAX,
            ..Default::default()
        })));
    }
    if faults.garble_meta {
        return send(tx, GARBLED_META).await;
    }
    match faults.oversize_meta_bytes {
        Some(n) => send_bytes(tx, padded_meta_event(&mempool, n)).await,
        None => send_bytes(tx, meta_event(&mempool)).await,
    }
}

/// `oversize_meta_bytes`: the meta event with a `padding` field of `n` bytes.
fn padded_meta_event(mempool: &[DevshardTx], n: usize) -> Bytes {
    let event = meta_event(mempool);
    let json = event
        .strip_prefix(b"data: ".as_slice())
        .and_then(|j| j.strip_suffix(b"\n\n".as_slice()))
        .unwrap_or_default();
    let mut v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    v["padding"] = serde_json::Value::String("x".repeat(n));
    data_event(serde_json::to_string(&v).unwrap_or_default().as_bytes())
}

/// Abandons the plan's run when dropped before [`AbandonOnDrop::disarm`].
struct AbandonOnDrop {
    host: Arc<HostState>,
    plan: Option<Plan>,
}

impl AbandonOnDrop {
    fn disarm(mut self) -> Option<Plan> {
        self.plan.take()
    }
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(plan) = &self.plan {
            abandon(&self.host, plan);
        }
    }
}

/// Forgets a run that will not finish (a retry may start it again).
fn abandon(host: &Arc<HostState>, plan: &Plan) {
    let Some(exec) = &plan.exec else { return };
    if !matches!(exec.mode, ExecMode::New) {
        return;
    }
    let (incarnation, id) = (plan.incarnation, exec.inference_id);
    host.on_session_detached(&plan.escrow_id, move |s| {
        if s.incarnation == incarnation {
            s.executions.remove(&id);
        }
    });
}

fn schedule_late_finish(
    core: &NetCore,
    host: &Arc<HostState>,
    plan: &Plan,
    finish: DevshardTx,
    after_ms: u64,
    via_peers: bool,
) {
    let targets: Vec<Arc<HostState>> = if via_peers {
        core.hosts
            .iter()
            .filter(|h| h.index != host.index)
            .cloned()
            .collect()
    } else {
        vec![Arc::clone(host)]
    };
    let escrow_id = plan.escrow_id.clone();
    let incarnation = plan.incarnation;
    let own = host.index;
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(after_ms)).await;
        for h in targets {
            let (index, finish) = (h.index, finish.clone());
            h.on_session(&escrow_id, move |s| {
                if index != own || s.incarnation == incarnation {
                    s.add_to_mempool(finish);
                }
            })
            .await;
        }
    });
}
