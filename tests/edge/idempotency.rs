//! Request accounting and idempotent retries against the simulated network: a retry with the
//! same `Idempotency-Key` gets the stored answer without a new race (the escrow's nonce does not
//! move), a concurrent duplicate joins the first, a different body → 422, and
//! `GET /v1/requests/{id}` shows the escrow and outcome.

use std::time::Duration;

use devshard_gateway::sim::{Profile, SimConfig};
use serde_json::Value;

use crate::live::{self, Live};

async fn start(profile: Profile) -> Live {
    let mut cfg = SimConfig::with_seed("edge-idempotency");
    cfg.hosts = 3;
    cfg.profile = profile;
    live::start_with(cfg, &[("DEVSHARD_WORKERS", "2")], |_| {}).await
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish()
}

async fn post(url: &str, body: &str, key: &str) -> (u16, awc::http::header::HeaderMap, Vec<u8>) {
    let mut resp = client()
        .post(format!("{url}/v1/chat/completions"))
        .insert_header(("Content-Type", "application/json"))
        .insert_header(("Idempotency-Key", key))
        .send_body(body.to_string())
        .await
        .unwrap();
    let headers = resp.headers().clone();
    let bytes = resp.body().limit(16 << 20).await.unwrap();
    (resp.status().as_u16(), headers, bytes.to_vec())
}

async fn admin_get(url: &str, path: &str) -> Value {
    let mut resp = client()
        .get(format!("{url}{path}"))
        .insert_header(("Authorization", "Bearer k"))
        .send()
        .await
        .unwrap();
    resp.json().limit(16 << 20).await.unwrap()
}

async fn nonce(url: &str) -> u64 {
    admin_get(url, "/v1/admin/escrows/42").await["snapshot"]["nonce"]
        .as_u64()
        .unwrap()
}

const WHOLE: &str = r#"{"max_tokens":16,"messages":[{"role":"user","content":"idem"}]}"#;
const STREAM: &str =
    r#"{"stream":true,"max_tokens":16,"messages":[{"role":"user","content":"idem s"}]}"#;

#[actix_rt::test]
async fn a_retry_with_the_same_key_replays_without_a_new_nonce() {
    let l = start(Profile::Zero).await;
    let url = l.url().to_string();
    let (s1, h1, b1) = post(&url, WHOLE, "key-1").await;
    assert_eq!(s1, 200, "{}", String::from_utf8_lossy(&b1));
    let after_first = nonce(&url).await;
    let (s2, h2, b2) = post(&url, WHOLE, "key-1").await;
    assert_eq!(s2, 200);
    assert_eq!(b1, b2, "the retry gets the stored body");
    assert_eq!(
        nonce(&url).await,
        after_first,
        "the retry consumed no nonce"
    );
    let rid = h1
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        h2.get("x-idempotent-replayed-from")
            .unwrap()
            .to_str()
            .unwrap(),
        rid
    );
    assert_eq!(h2.get("x-devshard-escrow").unwrap(), "42");

    let rec = admin_get(&url, &format!("/v1/requests/{rid}")).await;
    assert_eq!(rec["escrow"], "42", "{rec}");
    assert!(rec["race_id"].is_u64(), "{rec}");
    assert_eq!(rec["outcome"]["state"], "completed", "{rec}");
    assert_eq!(rec["outcome"]["status"], 200, "{rec}");
    assert_eq!(rec["replays"], 1, "{rec}");
    assert_eq!(rec["fingerprint"].as_str().unwrap().len(), 64, "{rec}");

    let other = r#"{"max_tokens":16,"messages":[{"role":"user","content":"other"}]}"#;
    let (s3, _, b3) = post(&url, other, "key-1").await;
    assert_eq!(s3, 422);
    let v: Value = serde_json::from_slice(&b3).unwrap();
    assert_eq!(v["error"]["code"], "idempotency_key_reused");
    assert_eq!(nonce(&url).await, after_first, "422 consumed no nonce");

    // Streaming: the retry replays the stored SSE bytes.
    let (s4, _, b4) = post(&url, STREAM, "key-s").await;
    assert_eq!(s4, 200);
    assert!(b4.ends_with(b"data: [DONE]\n\n"));
    let after_stream = nonce(&url).await;
    let (s5, h5, b5) = post(&url, STREAM, "key-s").await;
    assert_eq!(s5, 200);
    assert_eq!(h5.get("content-type").unwrap(), "text/event-stream");
    assert_eq!(b4, b5);
    assert_eq!(nonce(&url).await, after_stream);
    l.stop().await;
}

/// A request without an `Idempotency-Key` can never be replayed: the table keeps its record
/// but not its answer (issue 16: the SSE bytes of 10 000 streams were ≈ 20 MB for nothing).
#[actix_rt::test]
async fn only_an_answer_with_a_key_is_kept_for_replay() {
    let l = start(Profile::Zero).await;
    let url = l.url().to_string();
    for body in [WHOLE, STREAM] {
        let mut resp = client()
            .post(format!("{url}/v1/chat/completions"))
            .insert_header(("Content-Type", "application/json"))
            .send_body(body.to_string())
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let rid = resp
            .headers()
            .get("x-request-id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let answer = resp.body().limit(16 << 20).await.unwrap();
        assert!(!answer.is_empty());
        let rec = admin_get(&url, &format!("/v1/requests/{rid}")).await;
        assert_eq!(rec["outcome"]["state"], "completed", "{rec}");
        assert!(rec["stored_bytes"].is_null(), "no key, no bytes: {rec}");
        assert_eq!(rec["replay_truncated"], false, "{rec}");

        let key = format!("kept-{}", body.len());
        let (status, headers, bytes) = post(&url, body, &key).await;
        assert_eq!(status, 200);
        let rid = headers
            .get("x-request-id")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let rec = admin_get(&url, &format!("/v1/requests/{rid}")).await;
        assert_eq!(rec["stored_bytes"], bytes.len(), "with a key: {rec}");
    }
    l.stop().await;
}

#[actix_rt::test]
async fn a_concurrent_duplicate_joins_the_running_request() {
    // Hosts with latency: the duplicate arrives while the first request is still racing.
    let l = start(Profile::Default).await;
    let url = l.url().to_string();
    let before = nonce(&url).await;
    let t0 = std::time::Instant::now();
    let second = async {
        actix_rt::time::sleep(Duration::from_millis(5)).await;
        let r = post(&url, WHOLE, "key-c").await;
        (r, t0.elapsed())
    };
    let (a, (b, b_done)) = futures::join!(post(&url, WHOLE, "key-c"), second);
    eprintln!("duplicate answered after {b_done:?}");
    assert_eq!((a.0, b.0), (200, 200));
    assert_eq!(a.2, b.2, "both get the same answer");
    let replayed = [&a.1, &b.1]
        .iter()
        .filter(|h| h.get("x-idempotent-replayed-from").is_some())
        .count();
    assert_eq!(replayed, 1, "exactly one ran the race, the other joined it");
    let used = nonce(&url).await - before;
    // Same request once more without a key: it costs what one race costs.
    let mid = nonce(&url).await;
    let (s, _, _) = post(&url, WHOLE, "key-single").await;
    assert_eq!(s, 200);
    assert_eq!(
        used,
        nonce(&url).await - mid,
        "the duplicate used no extra nonce"
    );
    l.stop().await;
}

fn record(id: &str, key: &str, fp: &str) -> devshard_gateway::state::accounting::Record {
    use devshard_gateway::state::accounting::{Outcome, Record};
    Record {
        request_id: id.into(),
        fingerprint: fp.into(),
        model: "m".into(),
        caller: "anonymous".into(),
        stream: false,
        idempotency_key: Some(key.into()),
        escrow: None,
        race_id: None,
        nonces: Vec::new(),
        attempts: Vec::new(),
        race_ended_at_ms: None,
        started_at_ms: 1_000,
        finished_at_ms: None,
        outcome: Outcome::InFlight,
        replays: 0,
        replay_truncated: false,
        stored: None,
    }
}

#[actix_rt::test]
async fn oversized_answers_are_409_and_failures_release_the_key() {
    use devshard_gateway::{
        config::AccountingConfig,
        http::accounting::replay,
        state::accounting::{Accounting, Begin, Outcome},
    };
    let acc = Accounting::new(AccountingConfig::default());
    assert!(matches!(
        acc.begin(record("a", "k", "f"), 1_000),
        Begin::Fresh
    ));
    acc.finish_truncated("a", Outcome::Completed { status: 200 }, 2_000);
    let Begin::Join { request_id, done } = acc.begin(record("b", "k", "f"), 3_000) else {
        panic!("expected a join");
    };
    let mut escrow = None;
    let res = replay(&acc, &request_id, done, &mut escrow).await;
    assert_eq!(res.status().as_u16(), 409);
    assert!(matches!(
        acc.begin(record("c", "k", "other"), 3_000),
        Begin::KeyReused { .. }
    ));

    let failed = Outcome::Failed {
        status: 502,
        code: "upstream_error".into(),
        message: "x".into(),
    };
    assert!(matches!(
        acc.begin(record("d", "k2", "f"), 1_000),
        Begin::Fresh
    ));
    acc.finish("d", failed, None, 2_000);
    assert!(
        matches!(acc.begin(record("e", "k2", "f"), 3_000), Begin::Fresh),
        "a failed request releases its key"
    );
    // Past the window the key is free again.
    let late = 1_000 + 601_000;
    assert!(matches!(
        acc.begin(record("f", "k", "g"), late),
        Begin::Fresh
    ));
}

#[actix_rt::test]
async fn the_table_keeps_an_answer_only_for_a_keyed_request() {
    use devshard_gateway::{
        config::AccountingConfig,
        state::accounting::{Accounting, Begin, Outcome, Stored},
    };
    let acc = Accounting::new(AccountingConfig::default());
    let stored = || Stored {
        content_type: "application/json",
        bytes: bytes::Bytes::from_static(b"{}"),
    };
    let mut plain = record("p", "unused", "f");
    plain.idempotency_key = None;
    assert!(matches!(acc.begin(plain, 1_000), Begin::Fresh));
    acc.finish(
        "p",
        Outcome::Completed { status: 200 },
        Some(stored()),
        2_000,
    );
    let p = acc.get("p").unwrap();
    assert_eq!(p.outcome, Outcome::Completed { status: 200 });
    assert!(p.stored.is_none() && !p.replay_truncated);

    assert!(matches!(
        acc.begin(record("k", "key", "f"), 1_000),
        Begin::Fresh
    ));
    acc.finish(
        "k",
        Outcome::Completed { status: 200 },
        Some(stored()),
        2_000,
    );
    assert_eq!(acc.get("k").unwrap().stored.unwrap().bytes.as_ref(), b"{}");
    let Begin::Join { mut done, .. } = acc.begin(record("k2", "key", "f"), 3_000) else {
        panic!("a retry with the key joins");
    };
    assert!(*done.borrow_and_update(), "the first request already ended");
}

#[actix_rt::test]
async fn a_request_served_by_another_replica_after_all_is_forgotten_here() {
    use devshard_gateway::{
        config::AccountingConfig,
        state::accounting::{Accounting, Begin},
    };
    let acc = Accounting::new(AccountingConfig::default());
    assert!(matches!(
        acc.begin(record("a", "k", "f"), 1_000),
        Begin::Fresh
    ));
    acc.abandon("a");
    assert!(acc.get("a").is_none(), "no record: the owner records it");
    assert!(
        matches!(acc.begin(record("b", "k", "f"), 2_000), Begin::Fresh),
        "its key is free again"
    );
    acc.abandon("unknown");
    assert_eq!(acc.len(), 1);
}
