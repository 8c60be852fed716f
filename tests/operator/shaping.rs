//! Request and response shaping: logprobs and token ids are forced upstream (the simulated
//! hosts emit them when asked, as real hosts do) and stripped from what a client sees unless it
//! asked; per model, forcing can be turned off.

use std::time::Duration;

use crate::live::{self, admin_get, chat, request_id};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The data payloads of an SSE body, without `[DONE]`.
fn payloads(sse: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(sse)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|p| *p != "[DONE]")
        .map(str::to_string)
        .collect()
}

async fn sync(url: &str) {
    let resp = live::client(2)
        .post(format!("{url}/v1/admin/escrows/42/sync"))
        .insert_header(("Authorization", format!("Bearer {}", live::ADMIN)))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
}

/// The executor's response hash of the request that answered with `headers`.
async fn executor_hash(l: &live::Live, headers: &awc::http::header::HeaderMap) -> Vec<u8> {
    let url = l.url().to_string();
    let rid = request_id(headers);
    let mut nonce = None;
    for _ in 0..10_000 {
        let (_, r) = admin_get(&url, &format!("/v1/requests/{rid}")).await;
        if r["race_ended_at_ms"].is_i64() {
            nonce = r["nonces"]
                .as_array()
                .and_then(|n| n.last())
                .and_then(Value::as_u64);
            break;
        }
        tokio::task::yield_now().await;
    }
    let nonce = nonce.expect("the race ended");
    sync(&url).await;
    let hosts = l.sim.hosts().len() as u64;
    let view = l.sim.host_view((nonce % hosts) as usize, "42").unwrap();
    view.state
        .record(nonce)
        .expect("finished on its executor")
        .response_hash
        .to_vec()
}

fn has_any(text: &str, keys: &[&str]) -> bool {
    keys.iter().any(|k| text.contains(&format!("\"{k}\"")))
}

const INTERNAL: &[&str] = &[
    "token_ids",
    "prompt_token_ids",
    "top_logprobs",
    "logprob",
    "prompt_logprobs",
];

#[actix_rt::test]
async fn a_client_that_did_not_ask_never_sees_logprobs_and_one_that_asked_does() {
    let l = live::start("shaping", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    // Streaming, not asked: nothing internal reaches the client, though the host sent it.
    let (status, headers, body) = chat(
        &url,
        r#"{"stream":true,"max_tokens":4,"messages":[{"role":"user","content":"plain"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let seen = payloads(&body);
    assert!(seen.len() >= 4);
    for p in &seen {
        assert!(!has_any(p, INTERNAL), "stripped: {p}");
        let v: Value = serde_json::from_str(p).unwrap();
        assert!(v["choices"][0]["logprobs"].is_null(), "{p}");
    }
    let ours: [u8; 32] = Sha256::digest(seen.concat().as_bytes()).into();
    assert_ne!(
        executor_hash(&l, &headers).await,
        ours.to_vec(),
        "the executor streamed more than the client saw: logprobs were forced and stripped"
    );
    // Streaming, asked: logprobs (5 alternatives, forced) and token ids, byte for byte.
    let (status, headers, body) = chat(
        &url,
        r#"{"stream":true,"max_tokens":4,"logprobs":true,"return_token_ids":true,"messages":[{"role":"user","content":"asked"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let seen = payloads(&body);
    let content: Vec<Value> = seen
        .iter()
        .map(|p| serde_json::from_str::<Value>(p).unwrap())
        .filter(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
        })
        .collect();
    assert_eq!(content.len(), 4);
    for v in &content {
        let lp = &v["choices"][0]["logprobs"]["content"][0];
        assert!(lp["logprob"].is_f64(), "{v}");
        assert_eq!(lp["top_logprobs"].as_array().unwrap().len(), 5, "{v}");
        assert!(v["choices"][0]["token_ids"].is_array(), "{v}");
    }
    assert!(seen[0].contains("prompt_token_ids"), "{}", seen[0]);
    let ours: [u8; 32] = Sha256::digest(seen.concat().as_bytes()).into();
    assert_eq!(
        executor_hash(&l, &headers).await,
        ours.to_vec(),
        "nothing stripped"
    );
    // Whole answers: the same rule.
    let (_, _, body) = chat(
        &url,
        r#"{"max_tokens":3,"messages":[{"role":"user","content":"w"}]}"#,
    )
    .await;
    let text = String::from_utf8_lossy(&body).to_string();
    assert!(!has_any(&text, INTERNAL), "{text}");
    let (_, _, body) = chat(
        &url,
        r#"{"max_tokens":3,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"w"}]}"#,
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    let lp = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(lp.len(), 3, "{v}");
    assert_eq!(
        lp[0]["top_logprobs"].as_array().unwrap().len(),
        2,
        "the client's own top_logprobs"
    );
    assert!(
        v.get("prompt_token_ids").is_none() && v["choices"][0].get("token_ids").is_none(),
        "token ids not asked: {v}"
    );
    l.stop().await;
}

#[actix_rt::test]
async fn forcing_is_configurable_per_model() {
    let model = devshard_gateway::sim::SimConfig::with_seed("shaping-off").model;
    let l = live::start("shaping-off", 3, &[], |c| {
        c.shaping.models.insert(model, false);
    })
    .await;
    let url = l.url().to_string();
    let (status, headers, body) = chat(
        &url,
        r#"{"stream":true,"max_tokens":4,"messages":[{"role":"user","content":"plain"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let seen = payloads(&body);
    let ours: [u8; 32] = Sha256::digest(seen.concat().as_bytes()).into();
    assert_eq!(
        executor_hash(&l, &headers).await,
        ours.to_vec(),
        "not forced: the host sent no logprobs, nothing was stripped"
    );
    l.stop().await;
}
