//! Supervision: a panicking actor is respawned from its committed state and no other actor's
//! state changes (docs/health.md §8 invariant 12, docs/architecture.md §3).

use devshard_actors::{
    directory::{ActorKind, InjectPanicInto},
    escrow::messages::SyncHosts,
};
use devshard_gateway::sim::{Profile, SimConfig};

use super::harness::{Answer, Harness};

fn two_escrows() -> SimConfig {
    let mut cfg = SimConfig::with_seed("supervision");
    cfg.hosts = 5;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    cfg
}

async fn load(h: &Harness, escrow: &str, n: usize) -> Vec<Answer> {
    let futs = (0..n).map(|i| {
        h.chat_on(
            Some(escrow),
            Harness::body(&format!("{escrow}-{i}"), i % 2 == 0),
        )
    });
    futures::future::join_all(futs).await
}

#[actix_rt::test]
async fn a_panicking_escrow_is_respawned_and_other_escrows_never_fail() {
    let h = Harness::start(two_escrows()).await;
    assert!(load(&h, "42", 10).await.iter().all(Answer::is_success));
    let before = h.snapshot("42").await;
    let other_before = h.snapshot("43").await;
    // Load on both escrows runs while 42 panics.
    let (answers_43, answers_42, injected) =
        futures::join!(load(&h, "43", 30), load(&h, "42", 20), async {
            tokio::task::yield_now().await;
            h.directory
                .send(InjectPanicInto {
                    kind: ActorKind::Escrow,
                    id: "42".into(),
                })
                .await
        });
    injected.unwrap().unwrap();
    let failed: Vec<_> = answers_43.iter().filter(|a| !a.is_success()).collect();
    assert!(failed.is_empty(), "escrow 43 never fails: {failed:?}");
    for a in &answers_42 {
        if let Answer::Failed(e) = a {
            assert_eq!(
                e.status, 503,
                "in-flight requests of the crashed escrow get a clear 503: {e:?}"
            );
        }
    }
    h.wait_alive(ActorKind::Escrow, "42").await;
    let after = h.snapshot("42").await;
    assert!(
        after.nonce >= before.nonce,
        "respawned at or after its last durable nonce"
    );
    let other_after = h.snapshot("43").await;
    assert!(
        other_after.nonce >= other_before.nonce + 30,
        "43 kept its state and went on"
    );
    // The respawned escrow serves again, and every host agrees on every nonce (no reuse).
    assert!(load(&h, "42", 10).await.iter().all(Answer::is_success));
    for escrow in ["42", "43"] {
        h.escrow_addr(escrow).await.send(SyncHosts).await.unwrap();
        let snap = h.snapshot(escrow).await;
        for i in 0..5 {
            let view = h.sim.host_view(i, escrow).unwrap();
            assert_eq!(
                (view.latest_nonce, hex::encode(view.state_root)),
                (snap.nonce, snap.state_root.clone()),
                "host {i} of escrow {escrow} in lockstep"
            );
        }
    }
}

#[actix_rt::test]
async fn a_panicking_participant_is_respawned_with_its_record_and_others_keep_theirs() {
    let h = Harness::start(two_escrows()).await;
    assert!(load(&h, "42", 12).await.iter().all(Answer::is_success));
    let hosts: Vec<_> = (0..5).map(|i| h.host(i)).collect();
    let mut before = Vec::new();
    for a in &hosts {
        before.push(h.participant(a).await);
    }
    assert!(
        before.iter().any(|r| !r.outcomes.is_empty()),
        "outcomes were recorded"
    );
    let victim = hosts[2].to_string();
    h.directory
        .send(InjectPanicInto {
            kind: ActorKind::Participant,
            id: victim.clone(),
        })
        .await
        .unwrap()
        .unwrap();
    h.wait_alive(ActorKind::Participant, &victim).await;
    for (a, b) in hosts.iter().zip(&before) {
        assert_eq!(
            &h.participant(a).await,
            b,
            "record of {a} unchanged by the crash"
        );
    }
    assert!(
        load(&h, "43", 12).await.iter().all(Answer::is_success),
        "requests never fail"
    );
}
