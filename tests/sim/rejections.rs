//! Bad input gets the upstream status and error text, and leaves the host's state unchanged.

use devshard_actors::protocol::{
    crypto::SigningKey,
    diff::Diff,
    wire::{DiffJson, PayloadJson},
};

use crate::client::{config, read_stream, start, Session, Streamed};

const PROMPT: &[u8] = br#"{"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A network where host 1 already holds nonce 1.
async fn primed() -> (crate::client::TestNet, Session) {
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    let (nonce, out) = s.infer(vec![], PROMPT).await;
    assert_eq!((nonce, out.status), (1, 200));
    (net, s)
}

async fn send(s: &Session, host: usize, diffs: Vec<DiffJson>, nonce: u64) -> Streamed {
    let body = Session::body(diffs, nonce, None);
    read_stream(s.post(host, "chat/completions", body).await.unwrap()).await
}

#[actix_rt::test]
async fn malformed_json_is_400_and_changes_nothing() {
    tokio::time::pause();
    let (net, s) = primed().await;
    let before = net.host_view(1, "42").unwrap();
    let out = read_stream(
        s.post(1, "chat/completions", b"{\"diffs\":[".to_vec())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(out.status, 400);
    assert!(
        out.message().starts_with("invalid request body: "),
        "{}",
        out.message()
    );
    // A diff whose txs bytes are not a DiffContent.
    let bad = DiffJson {
        nonce: 2,
        txs: vec![0xff, 0xff],
        user_sig: vec![1; 65],
        post_state_root: None,
    };
    let out = send(&s, 1, vec![bad], 2).await;
    assert_eq!(out.status, 400);
    assert!(
        out.message().starts_with("decode diff nonce 2: "),
        "{}",
        out.message()
    );
    let after = net.host_view(1, "42").unwrap();
    assert_eq!(
        (after.latest_nonce, after.state_root),
        (before.latest_nonce, before.state_root)
    );
}

#[actix_rt::test]
async fn a_nonce_gap_is_rejected_with_the_upstream_text() {
    tokio::time::pause();
    let (net, mut s) = primed().await;
    let root = net.host_view(1, "42").unwrap().state_root;
    s.compose(vec![]);
    let d3 = s.compose(vec![]);
    let out = send(&s, 1, vec![DiffJson::from_diff(&d3)], 3).await;
    assert_eq!(out.status, 500);
    assert_eq!(
        out.message(),
        "apply diff nonce 3: invalid nonce: must be sequential: expected 2, got 3"
    );
    let v = net.host_view(1, "42").unwrap();
    assert_eq!((v.latest_nonce, v.state_root), (1, root));
    // Diffs before the failing one stay applied (each diff is atomic, the batch is not).
    let d4 = s.compose(vec![]);
    let batch = vec![DiffJson::from_diff(&s.diffs[1]), DiffJson::from_diff(&d4)];
    let out = send(&s, 1, batch, 4).await;
    assert_eq!(
        out.message(),
        "apply diff nonce 4: invalid nonce: must be sequential: expected 3, got 4"
    );
    assert_eq!(net.host_view(1, "42").unwrap().latest_nonce, 2);
}

#[actix_rt::test]
async fn a_diff_signed_by_another_key_is_rejected() {
    tokio::time::pause();
    let (net, s) = primed().await;
    let before = net.host_view(1, "42").unwrap();
    let mut local = s.sm.clone();
    let out = local.apply_best_effort(2, vec![]).unwrap();
    let forged = Diff::sign(2, vec![], "42", out.root, &SigningKey::derive("mallory", 0));
    let resp = send(&s, 1, vec![DiffJson::from_diff(&forged)], 2).await;
    assert_eq!(resp.status, 500);
    assert!(
        resp.message()
            .starts_with("apply diff nonce 2: invalid user signature"),
        "{}",
        resp.message()
    );
    let after = net.host_view(1, "42").unwrap();
    assert_eq!(
        (after.latest_nonce, after.state_root),
        (before.latest_nonce, before.state_root)
    );
}

#[actix_rt::test]
async fn a_root_mismatch_is_rejected_with_both_roots() {
    tokio::time::pause();
    let (net, s) = primed().await;
    let before = net.host_view(1, "42").unwrap();
    let mut local = s.sm.clone();
    let good = local.apply_best_effort(2, vec![]).unwrap().root;
    let lying = Diff::sign(2, vec![], "42", [7; 32], &s.key);
    let resp = send(&s, 1, vec![DiffJson::from_diff(&lying)], 2).await;
    assert_eq!(resp.status, 500);
    assert_eq!(
        resp.message(),
        format!(
            "apply diff nonce 2: post_state_root does not match computed state root: diff {}, computed {}",
            hex::encode([7u8; 32]),
            hex::encode(good)
        )
    );
    let after = net.host_view(1, "42").unwrap();
    assert_eq!(
        (after.latest_nonce, after.state_root),
        (before.latest_nonce, before.state_root)
    );
}

#[actix_rt::test]
async fn a_payload_that_does_not_match_its_start_is_500_but_diffs_stay() {
    tokio::time::pause();
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let host = s.executor(diff.nonce);
    let wrong = PayloadJson {
        max_tokens: 17,
        ..payload.clone()
    };
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(wrong));
    let out = read_stream(s.post(host, "chat/completions", body).await.unwrap()).await;
    assert_eq!(
        (out.status, out.message().as_str()),
        (500, "payload mismatch: max_tokens")
    );
    let other_prompt = PayloadJson {
        prompt: b"{\"x\":1}".to_vec(),
        ..payload
    };
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(other_prompt));
    let out = read_stream(s.post(host, "chat/completions", body).await.unwrap()).await;
    assert_eq!(
        (out.status, out.message().as_str()),
        (500, "prompt hash mismatch")
    );
    assert_eq!(net.host_view(host, "42").unwrap().latest_nonce, 1);
}

#[actix_rt::test]
async fn auth_failures_are_401_and_role_failures_403() {
    tokio::time::pause();
    let (net, s) = primed().await;
    let body = Session::body(vec![], 1, None);
    let now = s.now();
    let check = |out: Streamed, status: u16, text: &str| {
        assert_eq!((out.status, out.message().as_str()), (status, text));
    };
    let out = s
        .post_signed(1, "chat/completions", body.clone(), &s.key, now - 45)
        .await
        .unwrap();
    check(
        read_stream(out).await,
        401,
        "timestamp drift 45s exceeds maximum 30s",
    );
    let out = s
        .post_signed(1, "chat/completions", body.clone(), &s.key, now + 30)
        .await
        .unwrap();
    assert_eq!(
        read_stream(out).await.status,
        200,
        "30 s of drift is allowed"
    );
    let member = net.hosts()[2].key.clone();
    let out = s
        .post_signed(1, "chat/completions", body.clone(), &member, now)
        .await
        .unwrap();
    check(read_stream(out).await, 403, "restricted to escrow owner");
    let stranger = SigningKey::derive("stranger", 0);
    let out = s
        .post_signed(1, "verify-timeout", body.clone(), &stranger, now)
        .await
        .unwrap();
    check(read_stream(out).await, 403, "sender not in group");
    let url = format!("{}/chat/completions", s.urls[1]);
    let out = s.client.post(&url).send_body(body.clone()).await.unwrap();
    check(read_stream(out).await, 401, "missing auth headers");
    let out = s
        .client
        .post(&url)
        .insert_header(("X-Devshard-Signature", "zz"))
        .insert_header(("X-Devshard-Timestamp", now.to_string()))
        .send_body(body)
        .await
        .unwrap();
    check(read_stream(out).await, 401, "invalid signature hex");
}

#[actix_rt::test]
async fn unknown_escrows_and_missing_sessions() {
    tokio::time::pause();
    let (net, s) = primed().await;
    let mut other = Session::new(&net, "42");
    other.escrow_id = "777".into();
    other.urls = (0..4).map(|i| net.session_url(i, "777").unwrap()).collect();
    let out = read_stream(
        other
            .post(1, "chat/completions", Session::body(vec![], 1, None))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (out.status, out.message().as_str()),
        (500, "escrow not found")
    );
    // Host 3 never saw escrow 42: its GETs have no session.
    for path in ["mempool", "diffs?from=1&to=1", "signatures?nonce=1"] {
        let (status, body) = s.get(3, path).await;
        assert_eq!(
            (status, body["message"].as_str()),
            (404, Some("session not found")),
            "{path}"
        );
    }
    let client = crate::client::http();
    let resp = client
        .get(format!("{}/v1/devshard/nope", net.hosts()[0].url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let resp = client
        .get(format!("{}/chat/completions", s.urls[0]))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
}
