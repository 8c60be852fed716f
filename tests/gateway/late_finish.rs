//! Seed 002: a finish marker that arrives after the stream ended is a success, never a failure;
//! only a finish that never arrives becomes a host fault, and only after a confirmed timeout vote.

use std::time::Duration;

use devshard_actors::{outcome::OutcomeClass, protocol::state::SessionConfig};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::{Answer, Harness};

fn sim() -> SimConfig {
    let mut cfg = SimConfig::with_seed("late-finish");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    let mut session = SessionConfig::default_for_group(3);
    session.execution_timeout = 60;
    cfg.session_config = Some(session);
    cfg
}

#[actix_rt::test]
async fn a_late_finish_is_a_success_with_no_failure_sample() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    for delay_ms in [2, 800, 13_000] {
        let nonce = h.snapshot("42").await.nonce + 1;
        let executor = (nonce % 3) as usize;
        h.sim
            .set_faults(
                executor,
                Faults {
                    late_finish_ms: Some(delay_ms),
                    ..Default::default()
                },
            )
            .unwrap();
        let a = h
            .chat(Harness::body(&format!("late by {delay_ms} ms"), true))
            .await;
        assert!(
            matches!(a, Answer::Stream(_)),
            "the client keeps the answer: {a:?}"
        );
        let pending = h.snapshot("42").await.pending_finishes;
        assert_eq!(
            pending,
            vec![nonce],
            "finish pending right after the stream"
        );
        // Reconciliation polls the executor's mempool at 1 s, 2 s, 4 s, …
        tokio::time::sleep(Duration::from_millis(delay_ms as u64 + 20_000)).await;
        assert!(h.snapshot("42").await.pending_finishes.is_empty());
        let record = h.participant(&h.host(executor)).await;
        assert_eq!(
            record.outcomes.get(&OutcomeClass::HostFault),
            None,
            "no failure for host {executor}"
        );
        assert!(
            record
                .outcomes
                .get(&OutcomeClass::Success)
                .copied()
                .unwrap_or(0)
                >= 1
        );
        h.sim.clear_faults(executor).unwrap();
    }
}

#[actix_rt::test]
async fn a_finish_that_never_arrives_fails_only_after_a_confirmed_timeout() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    // Nonce 1 → host 1, whose finish never appears.
    h.sim
        .set_faults(
            1,
            Faults {
                late_finish_ms: Some(-1),
                ..Default::default()
            },
        )
        .unwrap();
    let a = h.chat(Harness::body("never finished", true)).await;
    assert!(a.is_success());
    // Before the execution deadline (confirmed_at + 60 s + 5 s): no verdict at all.
    tokio::time::sleep(Duration::from_secs(50)).await;
    let record = h.participant(&h.host(1)).await;
    assert!(
        record.outcomes.is_empty(),
        "nothing recorded before the deadline: {record:?}"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    let record = h.participant(&h.host(1)).await;
    assert_eq!(
        record.outcomes.get(&OutcomeClass::HostFault),
        Some(&1),
        "{record:?}"
    );
    assert!(h.snapshot("42").await.pending_finishes.is_empty());
}
