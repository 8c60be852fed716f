//! The plain OpenAI-compatible `POST /v1/chat/completions` of every simulated host: no
//! protocol, no auth, the same generator and latency profile (without the receipt delay, which
//! models devshard protocol work). Benchmarks put other proxies in front of it to compare.
//!
//! Streaming requests get headers after one RTT, the role chunk and first token after the time
//! to first token, then one chunk per token, the finish chunk with usage and `[DONE]`.
//! Non-streaming requests get one `chat.completion` JSON body after the whole generation time.
//! Of the fault knobs only `refuse_connections` and `down_for_ms` (the listener) apply here; the
//! latency profile's straggler knob applies as on the devshard route.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, StatusCode};
use hyper::body::{Frame, Incoming};

use super::{
    faults::AtomicCounters,
    generator::{Generation, PromptInfo},
    host::HostState,
    network::NetCore,
    server::{self, Resp},
};

pub(crate) async fn handle(core: &NetCore, host: &HostState, req: Request<Incoming>) -> Resp {
    AtomicCounters::bump(&host.counters.openai);
    let latency = host.latency();
    host.delay(latency.half_rtt()).await;
    let body = match server::read_body(req).await {
        Ok(b) => b,
        Err(reject) => return reject.into_response(),
    };
    if serde_json::from_slice::<serde_json::Value>(&body).is_err() {
        host.delay(latency.half_rtt()).await;
        let err = serde_json::json!({"error": {
            "message": "invalid JSON body", "type": "BadRequestError", "code": 400
        }});
        return server::json(StatusCode::BAD_REQUEST, &err);
    }
    let info = PromptInfo::parse(&body);
    let model = info.model.clone().unwrap_or_else(|| core.cfg.model.clone());
    let max_tokens = info.max_tokens.unwrap_or(u64::from(core.cfg.output_tokens));
    let generation = Generation::new(
        &body,
        &model,
        max_tokens,
        core.cfg.output_tokens,
        host.now_unix(),
    );
    let ttft = latency.ttft(body.len() as u64);
    let inter = latency.inter_token();
    if !info.stream {
        host.delay(ttft + inter * generation.token_count().saturating_sub(1) as u32)
            .await;
        tokio::time::sleep(host.straggler_delay()).await;
        host.delay(latency.half_rtt()).await;
        return server::response(
            StatusCode::OK,
            "application/json",
            server::full(generation.completion()),
        );
    }
    host.delay(latency.half_rtt()).await;
    let (tx, body) = server::channel_body();
    let delays = event_delays(host, ttft, inter, generation.token_count());
    tokio::spawn(async move {
        let frame = |s: &str| Ok(Frame::data(Bytes::from(format!("data: {s}\n\n"))));
        let mut events = vec![generation.role_chunk()];
        events.extend((0..generation.token_count()).map(|i| generation.content_chunk(i)));
        events.push(generation.finish_chunk());
        events.push("[DONE]".to_owned());
        for (i, e) in events.iter().enumerate() {
            if let Some(d) = delays.get(i).filter(|d| !d.is_zero()) {
                tokio::time::sleep(*d).await;
            }
            if tx.send(frame(e)).await.is_err() {
                return;
            }
        }
    });
    let mut resp = server::response(StatusCode::OK, "text/event-stream", body);
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// The jittered delay before each event: the role chunk waits the time to first token (and a
/// straggler's stall, `LatencyProfile::straggler_rate`), the
/// first content token follows at once, every later token waits one inter-token time.
fn event_delays(host: &HostState, ttft: Duration, inter: Duration, tokens: usize) -> Vec<Duration> {
    let mut out = vec![host.jittered(ttft) + host.straggler_delay(), Duration::ZERO];
    out.extend((1..tokens).map(|_| host.jittered(inter)));
    out
}
