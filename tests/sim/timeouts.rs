//! `verify-timeout` (docs/protocol.md §6.7): real votes, deadlines, executor mempool checks, and
//! a MsgTimeoutInference built from the votes that every host accepts.

use std::time::Duration;

use devshard_actors::protocol::{
    crypto::verify,
    proto::{DevshardTx, MsgTimeoutInference, TimeoutReason, TimeoutVote, Tx},
    state::{timeout_vote_content, InferenceStatus},
    wire::{PayloadJson, VerifyTimeoutRequest, VerifyTimeoutResponse},
};
use devshard_gateway::sim::Faults;

use crate::client::{config, read_stream, start, Session};

const PROMPT: &[u8] = br#"{"stream":true,"messages":[{"role":"user","content":"slow"}]}"#;

async fn ask(
    s: &Session,
    host: usize,
    id: u64,
    reason: &str,
    payload: Option<PayloadJson>,
) -> (u16, String, Option<VerifyTimeoutResponse>) {
    let req = VerifyTimeoutRequest {
        inference_id: id,
        reason: reason.into(),
        payload,
        diffs: Some(s.diffs_after(0)),
    };
    let body = serde_json::to_vec(&req).unwrap();
    let mut resp = s.post(host, "verify-timeout", body).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.body().await.unwrap();
    let parsed = serde_json::from_slice::<VerifyTimeoutResponse>(&bytes)
        .ok()
        .filter(|_| status == 200);
    (status, String::from_utf8_lossy(&bytes).into_owned(), parsed)
}

/// Builds the timeout tx from accepting votes of every host but the executor.
async fn collect_votes(
    s: &Session,
    executor: usize,
    id: u64,
    reason: &str,
    payload: Option<PayloadJson>,
) -> Vec<TimeoutVote> {
    let mut votes = Vec::new();
    for host in (0..s.urls.len()).filter(|h| *h != executor) {
        let (_, _, r) = ask(s, host, id, reason, payload.clone()).await;
        let r = r.unwrap();
        if r.accept {
            votes.push(TimeoutVote {
                voter_slot: r.voter_slot,
                accept: true,
                signature: r.signature.unwrap(),
            });
        }
    }
    votes
}

#[actix_rt::test]
async fn execution_timeout_votes_are_real_and_time_the_inference_out() {
    tokio::time::pause();
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let executor = s.executor(diff.nonce);
    net.set_faults(
        executor,
        Faults {
            drop_after_receipt: true,
            ..Faults::default()
        },
    )
    .unwrap();
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let out = read_stream(s.post(executor, "chat/completions", body).await.unwrap()).await;
    let receipt = out.receipt().unwrap().clone();
    assert!(receipt.receipt.is_some());
    s.compose(vec![Session::confirm_from(&receipt, diff.nonce)]);
    assert_eq!(s.sm.record(1).unwrap().status, InferenceStatus::Started);

    // Too early: no vote.
    let voter = (executor + 1) % 4;
    let (status, _, r) = ask(&s, voter, 1, "execution", None).await;
    assert_eq!(status, 200);
    let r = r.unwrap();
    assert!(!r.accept && r.signature.is_none());
    tokio::time::sleep(Duration::from_secs(1200)).await;
    let (_, _, r) = ask(&s, voter, 1, "execution", None).await;
    let r = r.unwrap();
    assert!(r.accept);
    assert_eq!(r.voter_slot, voter as u32);
    let content = timeout_vote_content("42", 1, TimeoutReason::Execution);
    verify(
        &content,
        r.signature.as_ref().unwrap(),
        &net.hosts()[voter].address,
    )
    .unwrap();

    let votes = collect_votes(&s, executor, 1, "execution", None).await;
    assert_eq!(votes.len(), 3);
    let timeout = DevshardTx::new(Tx::TimeoutInference(MsgTimeoutInference {
        inference_id: 1,
        reason: TimeoutReason::Execution as i32,
        votes,
    }));
    let d = s.compose(vec![timeout]);
    assert_eq!(d.txs.len(), 1, "the votes carry the threshold locally");
    assert_eq!(s.sm.record(1).unwrap().status, InferenceStatus::TimedOut);
    let body = Session::body(s.diffs_after(0), d.nonce, None);
    let out = read_stream(s.post(voter, "chat/completions", body).await.unwrap()).await;
    assert_eq!(out.status, 200);
    assert_eq!(
        out.receipt().unwrap().state_hash.as_deref(),
        Some(s.sm.state_root().as_slice())
    );
}

#[actix_rt::test]
async fn execution_votes_are_refused_while_the_executor_holds_a_finish() {
    tokio::time::pause();
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let executor = s.executor(diff.nonce);
    // The finish stays in the executor's mempool; the gateway never sees it.
    net.set_faults(
        executor,
        Faults {
            omit_meta: true,
            ..Faults::default()
        },
    )
    .unwrap();
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let out = read_stream(s.post(executor, "chat/completions", body).await.unwrap()).await;
    s.compose(vec![Session::confirm_from(out.receipt().unwrap(), 1)]);
    tokio::time::sleep(Duration::from_secs(1300)).await;
    let voter = (executor + 1) % 4;
    let (_, _, r) = ask(&s, voter, 1, "execution", None).await;
    assert!(!r.unwrap().accept, "the executor's mempool has the finish");
    // An unreachable executor counts as support.
    net.set_faults(
        executor,
        Faults {
            refuse_connections: true,
            ..Faults::default()
        },
    )
    .unwrap();
    let (_, _, r) = ask(&s, voter, 1, "execution", None).await;
    assert!(r.unwrap().accept);
}

#[actix_rt::test]
async fn refused_timeout_needs_the_deadline_and_a_matching_payload() {
    tokio::time::pause();
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    // A start that never reaches its executor (a refusal).
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let executor = s.executor(diff.nonce);
    let voter = (executor + 1) % 4;
    let (_, _, r) = ask(&s, voter, 1, "refused", Some(payload.clone())).await;
    assert!(!r.unwrap().accept, "refusal_timeout not reached");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (_, _, r) = ask(&s, voter, 1, "refused", None).await;
    assert!(!r.unwrap().accept, "no payload");
    let wrong = PayloadJson {
        model: "other".into(),
        ..payload.clone()
    };
    let (_, _, r) = ask(&s, voter, 1, "refused", Some(wrong)).await;
    assert!(!r.unwrap().accept, "payload does not match");
    let (_, _, r) = ask(&s, voter, 1, "refused", Some(payload.clone())).await;
    let r = r.unwrap();
    assert!(r.accept);
    let content = timeout_vote_content("42", 1, TimeoutReason::Refused);
    verify(
        &content,
        r.signature.as_ref().unwrap(),
        &net.hosts()[voter].address,
    )
    .unwrap();
    let votes = collect_votes(&s, executor, 1, "refused", Some(payload)).await;
    let timeout = DevshardTx::new(Tx::TimeoutInference(MsgTimeoutInference {
        inference_id: 1,
        reason: TimeoutReason::Refused as i32,
        votes,
    }));
    s.compose(vec![timeout]);
    assert_eq!(s.sm.record(1).unwrap().status, InferenceStatus::TimedOut);
}

#[actix_rt::test]
async fn verify_timeout_errors() {
    tokio::time::pause();
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    s.compose_inference(vec![], PROMPT, 16);
    let (status, body, _) = ask(&s, 2, 1, "execution", None).await;
    assert_eq!(
        (status, body.as_str()),
        (
            500,
            r#"{"message":"inference 1: expected started, got pending"}"#
        )
    );
    let (status, body, _) = ask(&s, 2, 99, "refused", None).await;
    assert_eq!(
        (status, body.as_str()),
        (500, r#"{"message":"inference not found: inference 99"}"#)
    );
    let (status, _, _) = ask(&s, 2, 1, "bored", None).await;
    assert_eq!(status, 400);
    assert_eq!(net.counters(2).unwrap().verify_timeout, 3);
}
