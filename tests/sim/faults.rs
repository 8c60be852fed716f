//! One test per fault knob: what a client observes when a host misbehaves that way.

use std::time::Duration;

use awc::{error::SendRequestError, ClientResponse};
use devshard_actors::protocol::{
    crypto::verify,
    proto::{DevshardTx, Tx},
    sse::{HostEvent, MalformedKind},
    state::state_sig_content,
    wire::DiffJson,
};
use devshard_gateway::sim::Faults;
use tokio::time::Instant;

use crate::client::{
    config, event_times, read_stream, read_stream_with, start, End, Session, Streamed, TestNet,
};

const PROMPT: &[u8] =
    br#"{"stream":true,"max_tokens":16,"messages":[{"role":"user","content":"knob"}]}"#;

async fn setup() -> (TestNet, Session) {
    let net = start(config(4)).await;
    let s = Session::new(&net, "42");
    (net, s)
}

/// Sets `faults` on the executor of the next nonce and returns that host.
fn arm(net: &TestNet, s: &Session, faults: Faults) -> usize {
    let host = s.executor(s.next_nonce());
    net.set_faults(host, faults).unwrap();
    host
}

/// Arms `faults` on the executor of the next nonce and composes that inference: the host and
/// the body of its `chat/completions` request.
fn arm_next(net: &TestNet, s: &mut Session, faults: Faults) -> (usize, Vec<u8>) {
    let host = arm(net, s, faults);
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    (host, body)
}

/// Arms `faults` on the executor of the next nonce and runs that inference: the host, the
/// nonce and what the client read.
async fn arm_infer(net: &TestNet, s: &mut Session, faults: Faults) -> (usize, u64, Streamed) {
    let host = arm(net, s, faults);
    let (nonce, out) = s.infer(vec![], PROMPT).await;
    (host, nonce, out)
}

/// Posts `body` to `host`'s `chat/completions` (the connection must succeed).
async fn post_chat(s: &Session, host: usize, body: Vec<u8>) -> ClientResponse {
    s.post(host, "chat/completions", body).await.unwrap()
}

/// Posts `body` to `host`'s `chat/completions` and reads the whole answer.
async fn chat(s: &Session, host: usize, body: Vec<u8>) -> Streamed {
    read_stream(post_chat(s, host, body).await).await
}

/// `Faults` with one knob set (the rest default).
macro_rules! knob {
    ($($field:ident: $value:expr),+ $(,)?) => {
        Faults { $($field: $value,)+ ..Faults::default() }
    };
}

fn finish_of(
    txs: &[DevshardTx],
    id: u64,
) -> Option<devshard_actors::protocol::proto::MsgFinishInference> {
    txs.iter().find_map(|t| match &t.tx {
        Some(Tx::FinishInference(f)) if f.inference_id == id => Some(f.clone()),
        _ => None,
    })
}

fn content_chunks(out: &Streamed) -> usize {
    out.chunks()
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count()
}

#[actix_rt::test]
async fn http_status_answers_with_upstream_texts_and_headers() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let cases = [
        (401, "timestamp drift 45s exceeds maximum 30s"),
        (403, "restricted to escrow owner"),
        (404, "Not Found"),
        (429, "rate limit exceeded"),
        (500, "escrow not found"),
        (503, "requests_disabled"),
    ];
    for (status, text) in cases {
        net.set_all_faults(knob!(http_status: Some(status), retry_after_s: Some(7)));
        let (_, out) = s.infer(vec![], PROMPT).await;
        assert_eq!((out.status, out.message().as_str()), (status, text));
        assert_eq!(out.header("retry-after"), Some("7"));
        let devshard_error = out.header("x-devshard-error");
        assert_eq!(
            devshard_error,
            (status == 503).then_some("requests_disabled"),
            "{status}"
        );
    }
    net.set_all_faults(knob!(http_status: Some(502), body: Some("bad gateway".into())));
    let (_, out) = s.infer(vec![], PROMPT).await;
    assert_eq!((out.status, out.message().as_str()), (502, "bad gateway"));
    assert!(
        (0..4).all(|h| net.host_view(h, "42").is_none()),
        "nothing was applied"
    );
    assert_eq!(net.counters(1).unwrap().chat, 2);
}

#[actix_rt::test]
async fn refuse_connections_refuses_until_cleared() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, body) = arm_next(&net, &mut s, knob!(refuse_connections: true));
    let err = s
        .post(host, "chat/completions", body.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, SendRequestError::Connect(_)), "{err:?}");
    net.clear_faults(host).unwrap();
    let out = chat(&s, host, body).await;
    assert_eq!(out.status, 200);
}

#[actix_rt::test]
async fn down_for_ms_cuts_streams_refuses_then_returns_with_its_state() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (_, out) = s.infer(vec![], PROMPT).await;
    assert_eq!(out.status, 200);
    // A stream that stalls forever is cut when the host goes down.
    let host = arm(&net, &s, knob!(stall_after_chunks: Some(1)));
    assert_eq!(host, 2);
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let resp = post_chat(&s, host, body).await;
    net.set_faults(host, knob!(down_for_ms: Some(5_000)))
        .unwrap();
    let out = read_stream(resp).await;
    // awc reports a cut chunked body as a plain end of stream; the SSE terminator is missing.
    assert_ne!(out.end, End::Silent);
    assert!(!out.has_done() && out.meta().is_none());
    let err = s.post(host, "mempool", vec![]).await.unwrap_err();
    assert!(matches!(err, SendRequestError::Connect(_)), "{err:?}");
    assert_eq!(
        net.host_view(host, "42").unwrap().latest_nonce,
        2,
        "state survives"
    );
    tokio::time::sleep(Duration::from_millis(5_100)).await;
    // Back on the same port, but behind: the newest diff alone leaves a gap.
    for _ in 0..4 {
        s.compose(vec![]);
    }
    let last = s.diffs.last().unwrap().clone();
    assert_eq!(s.executor(last.nonce), 2);
    let body = Session::body(vec![DiffJson::from_diff(&last)], last.nonce, None);
    let out = chat(&s, host, body).await;
    assert_eq!(
        out.message(),
        "apply diff nonce 6: invalid nonce: must be sequential: expected 3, got 6"
    );
    let body = Session::body(s.diffs_after(2), last.nonce, None);
    let out = chat(&s, host, body).await;
    assert_eq!(
        out.receipt().unwrap().state_hash.as_deref(),
        Some(s.sm.state_root().as_slice())
    );
}

#[actix_rt::test]
async fn drop_after_receipt_breaks_the_connection_without_a_finish() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, nonce, out) = arm_infer(&net, &mut s, knob!(drop_after_receipt: true)).await;
    assert!(out.receipt().unwrap().receipt.is_some());
    assert_eq!(out.events.len(), 1, "only the receipt: {:?}", out.events);
    let view = net.host_view(host, "42").unwrap();
    assert!(finish_of(&view.mempool, nonce).is_none());
    assert!(matches!(view.mempool[0].tx, Some(Tx::ConfirmStart(_))));
}

/// On the wire the chunked body is cut: no terminating `0` chunk (awc cannot tell, see above).
#[actix_rt::test]
async fn drop_after_receipt_leaves_the_chunked_body_unterminated() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, body) = arm_next(&net, &mut s, knob!(drop_after_receipt: true));
    let auth = devshard_actors::protocol::auth::sign_request(&s.key, "42", &body, s.now() as u64);
    let mut tcp =
        tokio::net::TcpStream::connect(net.hosts()[host].url.trim_start_matches("http://"))
            .await
            .unwrap();
    let head = format!(
        "POST /v1/devshard/sessions/42/chat/completions HTTP/1.1\r\nHost: sim\r\n\
         X-Devshard-Signature: {}\r\nX-Devshard-Timestamp: {}\r\nContent-Length: {}\r\n\r\n",
        auth.signature_hex,
        auth.timestamp,
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body).await.unwrap();
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK") && text.contains("transfer-encoding: chunked"));
    assert!(text.contains("devshard_receipt"));
    assert!(!text.ends_with("0\r\n\r\n"), "{text}");
}

#[actix_rt::test]
async fn stall_before_receipt_delays_the_headers() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, body) = arm_next(&net, &mut s, knob!(stall_before_receipt_ms: Some(10_000)));
    let t = Instant::now();
    let resp = post_chat(&s, host, body).await;
    assert!(t.elapsed() >= Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(read_stream(resp).await.status, 200);
}

#[actix_rt::test]
async fn first_token_delay_and_inter_chunk_stall_show_in_event_times() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let faults = knob!(first_token_delay_ms: Some(3_000), stall_after_chunks: Some(2), stall_ms: Some(7_000));
    let (host, body) = arm_next(&net, &mut s, faults);
    let t = Instant::now();
    let resp = post_chat(&s, host, body).await;
    let times = event_times(resp, t).await;
    let at = |pred: &dyn Fn(&HostEvent) -> bool| times.iter().find(|(_, e)| pred(e)).unwrap().0;
    let receipt = at(&|e| matches!(e, HostEvent::Receipt(_)));
    let first = at(&|e| matches!(e, HostEvent::Chunk(_)));
    assert!(
        first - receipt >= Duration::from_secs(3),
        "{:?}",
        first - receipt
    );
    let chunks: Vec<Duration> = times
        .iter()
        .filter(|(_, e)| matches!(e, HostEvent::Chunk(_)))
        .map(|(t, _)| *t)
        .collect();
    // role, token 0, token 1, then the stall before token 2.
    assert!(chunks[3] - chunks[2] >= Duration::from_secs(7));
    assert!(chunks[2] - chunks[1] < Duration::from_secs(1));
}

#[actix_rt::test]
async fn stall_without_stall_ms_goes_silent() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, body) = arm_next(&net, &mut s, knob!(stall_after_chunks: Some(0)));
    let resp = post_chat(&s, host, body).await;
    let out = read_stream_with(resp, Duration::from_secs(600)).await;
    assert_eq!(out.end, End::Silent);
    assert_eq!(out.chunks().len(), 1, "only the role chunk");
    assert!(!out.has_done());
}

#[actix_rt::test]
async fn empty_stream_is_receipt_role_done_and_a_finish_without_tokens() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (_, nonce, out) = arm_infer(&net, &mut s, knob!(empty_stream: true)).await;
    assert_eq!(out.chunks().len(), 1);
    assert_eq!(content_chunks(&out), 0);
    assert!(out.has_done());
    let finish = finish_of(out.meta().unwrap(), nonce).unwrap();
    assert_eq!(finish.output_tokens, 0);
}

#[actix_rt::test]
async fn error_event_streams_an_openai_error_and_no_meta() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, nonce, out) = arm_infer(
        &net,
        &mut s,
        knob!(error_event: Some(serde_json::json!(true))),
    )
    .await;
    let err = out.events.iter().find_map(|e| match e {
        HostEvent::Error(b) => Some(serde_json::from_slice::<serde_json::Value>(b).unwrap()),
        _ => None,
    });
    assert_eq!(err.unwrap()["error"]["code"], 500);
    assert!(out.has_done() && out.meta().is_none());
    assert!(finish_of(&net.host_view(host, "42").unwrap().mempool, nonce).is_none());
    let custom = serde_json::json!({"error": {"message": "context length exceeded", "type": "BadRequestError", "code": 400}});
    let (_, _, out) = arm_infer(&net, &mut s, knob!(error_event: Some(custom.clone()))).await;
    assert!(out
        .events
        .contains(&HostEvent::Error(custom.to_string().into())));
}

#[actix_rt::test]
async fn truncate_before_done_ends_cleanly_without_terminator() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, nonce, out) = arm_infer(&net, &mut s, knob!(truncate_before_done: true)).await;
    assert_eq!(out.end, End::Eof);
    assert_eq!(content_chunks(&out), 5);
    assert!(!out.has_done() && out.meta().is_none());
    assert!(finish_of(&net.host_view(host, "42").unwrap().mempool, nonce).is_none());
}

#[actix_rt::test]
async fn omit_and_garble_meta_keep_the_finish_in_the_mempool() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (_, nonce, out) = arm_infer(&net, &mut s, knob!(omit_meta: true)).await;
    assert!(out.has_done() && out.meta().is_none());
    let (_, mempool) = s.get(s.executor(nonce), "mempool").await;
    let txs: devshard_actors::protocol::wire::MempoolResponse =
        serde_json::from_value(mempool).unwrap();
    assert!(finish_of(&txs.decode_txs().unwrap(), nonce).is_some());

    let (_, nonce, out) = arm_infer(&net, &mut s, knob!(garble_meta: true)).await;
    assert!(out.has_done() && out.meta().is_none());
    let malformed = out
        .events
        .iter()
        .any(|e| matches!(e, HostEvent::Malformed(m) if m.kind == MalformedKind::Meta));
    assert!(malformed, "{:?}", out.events.last());
    assert!(finish_of(
        &net.host_view(s.executor(nonce), "42").unwrap().mempool,
        nonce
    )
    .is_some());
}

#[actix_rt::test]
async fn late_finish_appears_later_never_or_at_the_peers() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, nonce, out) = arm_infer(&net, &mut s, knob!(late_finish_ms: Some(4_000))).await;
    assert!(
        finish_of(out.meta().unwrap(), nonce).is_none(),
        "not in the meta"
    );
    assert!(finish_of(&net.host_view(host, "42").unwrap().mempool, nonce).is_none());
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    assert!(finish_of(&net.host_view(host, "42").unwrap().mempool, nonce).is_some());

    let (host, nonce, _) = arm_infer(&net, &mut s, knob!(late_finish_ms: Some(-1))).await;
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(finish_of(&net.host_view(host, "42").unwrap().mempool, nonce).is_none());

    let (host, nonce, _) = arm_infer(
        &net,
        &mut s,
        knob!(late_finish_ms: Some(0), finish_via_peers: true),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(finish_of(&net.host_view(host, "42").unwrap().mempool, nonce).is_none());
    let peer = (0..4)
        .find(|h| *h != host && net.host_view(*h, "42").is_some())
        .unwrap();
    assert!(finish_of(&net.host_view(peer, "42").unwrap().mempool, nonce).is_some());
}

#[actix_rt::test]
async fn withhold_state_sig_and_wrong_state_hash() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (host, nonce, out) = arm_infer(&net, &mut s, knob!(withhold_state_sig: true)).await;
    let r = out.receipt().unwrap();
    assert!(r.state_sig.is_none() && r.state_hash.is_some());
    let (_, sigs) = s.get(host, &format!("signatures?nonce={nonce}")).await;
    assert!(sigs["signatures"].is_null());

    let (host, nonce, out) = arm_infer(&net, &mut s, knob!(wrong_state_hash: true)).await;
    let r = out.receipt().unwrap();
    let reported = r.state_hash.clone().unwrap();
    assert_ne!(reported.as_slice(), s.sm.state_root().as_slice());
    let addr = &net.hosts()[host].address;
    verify(
        &state_sig_content(&reported, "42", nonce),
        r.state_sig.as_ref().unwrap(),
        addr,
    )
    .unwrap();
    // The stored signature is over the real root.
    let (_, sigs) = s.get(host, &format!("signatures?nonce={nonce}")).await;
    let resp: devshard_actors::protocol::wire::SignaturesResponse =
        serde_json::from_value(sigs).unwrap();
    let sig = resp.signatures.unwrap()[&(host as u32)].clone();
    verify(
        &state_sig_content(&s.sm.state_root(), "42", nonce),
        &sig,
        addr,
    )
    .unwrap();
}

#[actix_rt::test]
async fn fork_from_nonce_diverges_until_the_session_is_forgotten() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    net.set_faults(1, knob!(fork_from_nonce: Some(5))).unwrap();
    let (_, out) = s.infer(vec![], PROMPT).await;
    assert_eq!(
        out.receipt().unwrap().state_hash.as_deref(),
        Some(s.sm.state_root().as_slice())
    );
    for _ in 0..3 {
        s.compose(vec![]);
    }
    let (nonce, out) = s.infer(vec![], PROMPT).await;
    assert_eq!((nonce, s.executor(nonce)), (5, 1));
    let reported = out.receipt().unwrap().state_hash.clone().unwrap();
    assert_ne!(
        reported.as_slice(),
        s.sm.state_root().as_slice(),
        "forked at 5"
    );
    net.clear_faults(1).unwrap();
    let d = s.compose(vec![]);
    let body = Session::body(s.diffs_after(5), d.nonce, None);
    let out = chat(&s, 1, body).await;
    assert_eq!(out.status, 500);
    assert_eq!(
        out.message(),
        format!(
            "apply diff nonce 6: post_state_root does not match computed state root: diff {}, computed {}",
            hex::encode(&d.post_state_root),
            hex::encode(&reported)
        )
    );
    assert_eq!(
        net.host_view(1, "42").unwrap().forked_at,
        Some(5),
        "clearing does not un-fork"
    );
    net.set_faults(1, knob!(forget_session: true)).unwrap();
    assert!(net.host_view(1, "42").is_none(), "restarted empty");
    let body = Session::body(s.diffs_after(0), d.nonce, None);
    let out = chat(&s, 1, body).await;
    assert_eq!(
        out.receipt().unwrap().state_hash.as_deref(),
        Some(s.sm.state_root().as_slice())
    );
}

#[actix_rt::test]
async fn forget_session_needs_a_replay_from_nonce_one() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (_, out) = s.infer(vec![], PROMPT).await;
    assert_eq!(out.status, 200);
    net.set_faults(1, knob!(forget_session: true)).unwrap();
    let (status, body) = s.get(1, "mempool").await;
    assert_eq!(
        (status, body["message"].as_str()),
        (404, Some("session not found"))
    );
    for _ in 0..4 {
        s.compose(vec![]);
    }
    let last = s.diffs.last().unwrap().clone();
    let body = Session::body(vec![DiffJson::from_diff(&last)], last.nonce, None);
    let out = chat(&s, 1, body).await;
    assert_eq!(
        out.message(),
        "apply diff nonce 5: invalid nonce: must be sequential: expected 1, got 5"
    );
}

#[actix_rt::test]
async fn clock_skew_shifts_the_host_clock() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let skewed = knob!(clock_skew_s: Some(45), times: Some(1));
    let (host, _, out) = arm_infer(&net, &mut s, skewed).await;
    assert_eq!(
        (out.status, out.message().as_str()),
        (401, "timestamp drift 45s exceeds maximum 30s")
    );
    // The set was for one request only; the same nonce now passes.
    let mut s = Session::new(&net, "42");
    let (nonce, out) = s.infer(vec![], PROMPT).await;
    assert_eq!((nonce, s.executor(nonce), out.status), (1, host, 200));
    let (_, _, out) = arm_infer(&net, &mut s, knob!(clock_skew_s: Some(-20))).await;
    assert_eq!(out.receipt().unwrap().confirmed_at, Some(s.now() - 20));
}

#[actix_rt::test]
async fn signatures_empty_hides_stored_signatures() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let (nonce, _) = s.infer(vec![], PROMPT).await;
    let host = s.executor(nonce);
    let (_, sigs) = s.get(host, &format!("signatures?nonce={nonce}")).await;
    assert!(sigs["signatures"].is_object());
    net.set_faults(host, knob!(signatures_empty: true)).unwrap();
    let (status, sigs) = s.get(host, &format!("signatures?nonce={nonce}")).await;
    assert_eq!(
        (status, sigs),
        (200, serde_json::json!({"signatures": null}))
    );
}

#[actix_rt::test]
async fn times_and_scripts_apply_to_the_next_requests_only() {
    tokio::time::pause();
    let net = start(config(1)).await;
    let mut s = Session::new(&net, "42");
    net.set_faults(0, knob!(http_status: Some(503), times: Some(2)))
        .unwrap();
    let statuses = [
        s.infer(vec![], PROMPT).await.1.status,
        s.infer(vec![], PROMPT).await.1.status,
    ];
    assert_eq!(statuses, [503, 503]);
    assert!(net.faults(0).unwrap().is_empty(), "spent");
    // Start over (the rejected nonces never reached the host).
    let mut s = Session::new(&net, "42");
    let script = vec![
        knob!(http_status: Some(429), times: Some(1)),
        knob!(empty_stream: true, times: Some(1)),
    ];
    net.set_fault_script(0, script).unwrap();
    let (_, a) = s.infer(vec![], PROMPT).await;
    assert_eq!(a.status, 429);
    let mut s = Session::new(&net, "42");
    let (_, b) = s.infer(vec![], PROMPT).await;
    assert_eq!(content_chunks(&b), 0);
    let (_, c) = s.infer(vec![], PROMPT).await;
    assert_eq!(content_chunks(&c), 5);
}

/// A client that gives up before the receipt cancels the run: a retry of the nonce runs it.
#[actix_rt::test]
async fn a_client_gone_before_the_receipt_leaves_no_running_inference() {
    tokio::time::pause();
    let (net, mut s) = setup().await;
    let stall = knob!(stall_before_receipt_ms: Some(10_000), times: Some(1));
    let (host, body) = arm_next(&net, &mut s, stall);
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        s.post(host, "chat/completions", body.clone()),
    )
    .await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let out = chat(&s, host, body).await;
    assert_eq!(content_chunks(&out), 5, "{:?}", out.events);
}
