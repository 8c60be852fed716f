//! A refused nonce timed out by vote keeps its persisted payload until its timeout is durable
//! (`actors/src/escrow/book/payloads.rs`). Found by CI's chaos run of `c49679b` (seed 12,
//! release build): eleven timeout votes were confirmed 40 ms before a `kill -9`, their queued
//! timeouts not yet in a diff, and the 1 s tick deleted their payloads meanwhile; the restarted
//! gateway restored the nonces as pending and voted again without the payloads, which every
//! verifier refuses, so they stayed pending on their hosts (invariant 4, 71 s past the deadline).

use std::{sync::Arc, time::Duration};

use devshard_actors::{
    directory::{ActorKind, InjectPanicInto},
    escrow::EscrowConfig,
    protocol::state::{InferenceStatus, SessionConfig},
    store::MemoryStore,
};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::Harness;

#[actix_rt::test]
async fn ci_c49679b_a_timeout_confirmed_just_before_a_crash_is_voted_again_with_its_payload() {
    tokio::time::pause();
    let mut cfg = SimConfig::with_seed("timeout-payloads");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    let mut session = SessionConfig::default_for_group(3);
    session.execution_timeout = 60;
    session.refusal_timeout = 10;
    cfg.session_config = Some(session);
    // The confirmed timeout waits 10 s for a diff to ride in: the crash below falls in that
    // window, after the 1 s tick that deleted the payload before the fix.
    let escrow_cfg = EscrowConfig {
        timeout_tx_batch_ms: 10_000,
        ..EscrowConfig::default()
    };
    let h = Harness::start_with(cfg, Arc::new(MemoryStore::new()), escrow_cfg).await;
    let nonce = h.snapshot("42").await.nonce + 1;
    let executor = (nonce % 3) as usize;
    let refuse = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    h.sim.set_faults(executor, refuse).unwrap();
    assert!(h
        .chat(Harness::body("refused, then answered elsewhere", false))
        .await
        .is_success());
    assert_eq!(h.snapshot("42").await.pending_timeouts, vec![nonce]);
    // Refusal deadline (10 s) + the gateway's buffer (5 s): the vote confirms, its tx is queued.
    let mut waited = 0;
    while !h.snapshot("42").await.pending_timeouts.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
        assert!(waited < 600, "the vote confirmed within 60 s");
    }
    let snap = h.snapshot("42").await;
    assert_eq!(
        snap.pending_txs, 1,
        "the timeout is queued, not yet in a diff"
    );
    // Two ticks of the 1 s payload clean-up, then the crash (memory lost, the store kept).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    h.directory
        .send(InjectPanicInto {
            kind: ActorKind::Escrow,
            id: "42".into(),
        })
        .await
        .unwrap()
        .unwrap();
    h.wait_alive(ActorKind::Escrow, "42").await;
    h.sim.clear_faults(executor).unwrap();
    // The restored nonce is voted again, with its payload, and timed out on every host.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let snap = h.snapshot("42").await;
    assert!(
        snap.pending_timeouts.is_empty(),
        "{:?}",
        snap.pending_timeouts
    );
    h.escrow_addr("42")
        .await
        .send(devshard_actors::escrow::messages::SyncHosts)
        .await
        .unwrap();
    for i in 0..3 {
        let view = h.sim.host_view(i, "42").unwrap();
        assert_eq!(
            view.state.record(nonce).map(|r| r.status),
            Some(InferenceStatus::TimedOut),
            "host {i}"
        );
    }
}
