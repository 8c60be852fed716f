//! The real gateway over HTTP (in-process server, real sockets) against the simulated network:
//! what a client sees is exactly what the host produced, usage is right, bad input consumes no
//! nonce.

use std::time::Duration;

use crate::live::{self, chat as post, escrow_nonce};
use sha2::{Digest, Sha256};

async fn admin_sync(url: &str) -> serde_json::Value {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let mut resp = client
        .post(format!("{url}/v1/admin/escrows/42/sync"))
        .insert_header(("Authorization", "Bearer k"))
        .send()
        .await
        .unwrap();
    resp.json().await.unwrap()
}

/// The data payloads of an SSE body, without `[DONE]`.
fn payloads(sse: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(sse)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|p| *p != "[DONE]")
        .map(str::to_string)
        .collect()
}

#[actix_rt::test]
async fn streamed_bytes_are_exactly_the_hosts_chunks_and_usage_is_right() {
    let l = live::start("http-edge", 3, &[], |_| {}).await;
    let (sim, url) = (&l.sim, l.url().to_string());
    let (status, headers, body) = post(
        &url,
        // Asking for logprobs and token ids: nothing is stripped, so the bytes are the host's.
        r#"{"stream":true,"max_tokens":20,"logprobs":true,"return_token_ids":true,"messages":[{"role":"user","content":"exact bytes"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("content-type").unwrap(), "text/event-stream");
    assert!(headers.get("x-request-id").is_some());
    assert_eq!(headers.get("x-devshard-escrow").unwrap(), "42");
    assert!(body.ends_with(b"data: [DONE]\n\n"));
    let streamed = payloads(&body);
    let last: serde_json::Value = serde_json::from_str(streamed.last().unwrap()).unwrap();
    assert_eq!(
        last["usage"]["completion_tokens"], 20,
        "max_tokens caps the answer"
    );
    // The executor hashed exactly the payloads it streamed into its signed finish marker; the
    // gateway's bytes must hash to the same value.
    let (_, _, _) = post(&url, r#"{"messages":[{"role":"user","content":"next"}]}"#).await;
    admin_sync(&url).await;
    let view = sim.host_view(1, "42").unwrap();
    let record = view
        .state
        .record(1)
        .expect("inference 1 finished on its executor");
    let ours: [u8; 32] = Sha256::digest(streamed.concat().as_bytes()).into();
    assert_eq!(
        record.response_hash,
        ours.to_vec(),
        "client bytes == host bytes"
    );
    assert_eq!(record.output_tokens, 20);
    l.stop().await;
}

#[actix_rt::test]
async fn a_whole_answer_is_the_hosts_completion_and_bad_input_consumes_no_nonce() {
    let l = live::start("http-edge", 3, &[], |_| {}).await;
    let (sim, url) = (&l.sim, l.url().to_string());
    let (status, _, body) = post(&url, r#"{"messages":[{"role":"user","content":"whole"}]}"#).await;
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let before = escrow_nonce(&url).await;
    let big = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(5 << 20)
    );
    for (bad, want) in [
        ("{not json", 400),
        (
            r#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
            404,
        ),
        (r#"{"messages":[]}"#, 400),
        (
            r#"{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
            400,
        ),
        (
            r#"{"max_tokens":100000,"messages":[{"role":"user","content":"x"}]}"#,
            400,
        ),
        (big.as_str(), 413),
    ] {
        let (status, _, body) = post(&url, bad).await;
        assert_eq!(status, want, "{}", String::from_utf8_lossy(&body));
        let err: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{err}"
        );
    }
    let after = escrow_nonce(&url).await;
    assert_eq!(before, after, "bad input consumed no nonce");
    let max = (0..3)
        .map(|i| sim.host_view(i, "42").map_or(0, |v| v.latest_nonce))
        .max();
    assert_eq!(max, Some(after), "no host saw anything new either");
    l.stop().await;
}

async fn admin_get(url: &str, path: &str, key: Option<&str>) -> (u16, serde_json::Value) {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let mut req = client.get(format!("{url}{path}"));
    if let Some(k) = key {
        req = req.insert_header(("Authorization", format!("Bearer {k}")));
    }
    let mut resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (
        status,
        resp.json()
            .limit(16 << 20)
            .await
            .unwrap_or(serde_json::Value::Null),
    )
}

#[actix_rt::test]
async fn debug_endpoints_show_every_actor_and_repairs_without_secrets() {
    let l = live::start("http-edge", 3, &[], |_| {}).await;
    let (sim, url) = (&l.sim, l.url().to_string());
    // Nonce 1 → host 1 lies about its state once: a repair starts.
    sim.set_faults(
        1,
        devshard_gateway::sim::Faults {
            wrong_state_hash: true,
            times: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let (status, _, _) = post(
        &url,
        r#"{"stream":true,"messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, all) = admin_get(&url, "/v1/debug/actors", Some("k")).await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["kind"].as_str())
        .collect();
    for k in ["directory", "escrow", "participant"] {
        assert!(kinds.contains(&k), "{k} listed: {kinds:?}");
    }
    let (_, escrows) = admin_get(&url, "/v1/debug/actors?kind=escrow", Some("k")).await;
    assert!(escrows["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["kind"] == "escrow"));
    let (status, one) = admin_get(&url, "/v1/debug/escrows/42", Some("k")).await;
    assert_eq!(status, 200);
    assert!(one["state"]["nonce"].as_u64().unwrap() >= 2);
    let repairs = one["repairs"].as_array().unwrap();
    assert_eq!(repairs.len(), 1, "{one}");
    assert!(
        repairs[0]["blocked_since_ms"].as_i64().is_some()
            && repairs[0]["next_tick_ms"].as_i64().is_some()
    );
    let (status, _) = admin_get(&url, "/v1/debug/actors", None).await;
    assert_eq!(status, 401);
    let text = all.to_string();
    assert!(
        !text.contains(&sim.gateway_key().secret_hex()),
        "no private key in debug output"
    );
    l.stop().await;
}
