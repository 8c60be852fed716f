//! The main path: requests succeed, hosts stay in lockstep with the gateway, failures before
//! content move to the next host, and unfinished attempts are timed out by vote.

use std::time::Duration;

use devshard_actors::escrow::messages::SyncHosts;
use devshard_actors::protocol::state::InferenceStatus;
use devshard_gateway::sim::{Faults, SimConfig};

use super::harness::{Answer, Harness};

fn sim(hosts: usize) -> SimConfig {
    let mut cfg = SimConfig::with_seed("flow");
    cfg.hosts = hosts;
    cfg.profile = devshard_gateway::sim::Profile::Zero;
    cfg
}

#[actix_rt::test]
async fn streaming_and_whole_answers_arrive() {
    let h = Harness::start(sim(3)).await;
    let a = h.chat(Harness::body("hello streaming", true)).await;
    let Answer::Stream(bytes) = &a else {
        panic!("expected a stream, got {a:?}")
    };
    let text = String::from_utf8_lossy(bytes);
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "stream ends with [DONE]: {text}"
    );
    assert!(!text.contains("devshard_receipt") && !text.contains("devshard_meta"));
    assert!(!a.content().is_empty());
    let w = h.chat(Harness::body("hello whole", false)).await;
    let Answer::Whole(body) = &w else {
        panic!("expected a body, got {w:?}")
    };
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    assert!(!w.content().is_empty());
}

#[actix_rt::test]
async fn concurrent_requests_keep_every_host_in_lockstep() {
    let h = Harness::start(sim(7)).await;
    let futs = (0..100).map(|i| h.chat(Harness::body(&format!("request {i}"), i % 2 == 0)));
    let answers = futures::future::join_all(futs).await;
    let failed: Vec<_> = answers.iter().filter(|a| !a.is_success()).collect();
    assert!(failed.is_empty(), "all succeed: {failed:?}");
    let addr = h.escrow_addr("42").await;
    addr.send(SyncHosts).await.unwrap();
    let snap = h.snapshot("42").await;
    assert!(snap.nonce >= 100);
    for i in 0..7 {
        let view = h.sim.host_view(i, "42").expect("host has the session");
        assert_eq!(
            view.latest_nonce, snap.nonce,
            "host {i} at the gateway's nonce"
        );
        assert_eq!(
            hex::encode(view.state_root),
            snap.state_root,
            "host {i} at the gateway's root"
        );
    }
}

#[actix_rt::test]
async fn a_refusing_host_is_skipped_for_the_next_one() {
    let h = Harness::start(sim(3)).await;
    // Nonce 1 goes to slot 1.
    h.sim
        .set_faults(
            1,
            Faults {
                refuse_connections: true,
                ..Default::default()
            },
        )
        .unwrap();
    let a = h.chat(Harness::body("first", true)).await;
    assert!(a.is_success(), "{a:?}");
    let snap = h.snapshot("42").await;
    assert_eq!(snap.nonce, 2, "one failed attempt, one successful");
}

#[actix_rt::test]
async fn an_attempt_that_never_finishes_is_timed_out_by_vote() {
    tokio::time::pause();
    let mut cfg = sim(3);
    let mut session = devshard_actors::protocol::state::SessionConfig::default_for_group(3);
    session.execution_timeout = 30;
    session.refusal_timeout = 10;
    cfg.session_config = Some(session);
    let mut h = Harness::start(cfg).await;
    h.limits.stall_timeout = Duration::from_secs(5);
    // Nonce 1 → host 1: receipt, then silence.
    h.sim
        .set_faults(
            1,
            Faults {
                stall_after_chunks: Some(0),
                stall_ms: Some(3_600_000),
                ..Default::default()
            },
        )
        .unwrap();
    let a = h.chat(Harness::body("never finishes", true)).await;
    assert!(
        a.is_success(),
        "the request moves on to another host: {a:?}"
    );
    h.sim.clear_faults(1).unwrap();
    // Past confirmed_at + 30 s + 5 s the escrow collects votes and sequences the timeout.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let snap = h.snapshot("42").await;
    assert!(snap.pending_timeouts.is_empty(), "{snap:?}");
    let addr = h.escrow_addr("42").await;
    addr.send(SyncHosts).await.unwrap();
    let view = h.sim.host_view(0, "42").unwrap();
    let rec = view.state.record(1).expect("inference 1 recorded");
    assert_eq!(rec.status, InferenceStatus::TimedOut);
}

#[actix_rt::test]
async fn requests_spread_over_escrows_that_serve_the_same_model() {
    let mut cfg = sim(3);
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    let h = Harness::start(cfg).await;
    let answers = futures::future::join_all(
        (0..20).map(|i| h.chat(Harness::body(&format!("spread {i}"), true))),
    )
    .await;
    assert!(answers.iter().all(|a| a.is_success()));
    let (a, b) = (h.snapshot("42").await.nonce, h.snapshot("43").await.nonce);
    assert!(a >= 5 && b >= 5, "both escrows serve: {a} and {b} nonces");
}
