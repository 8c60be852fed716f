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

/// Found by the hour-long chaos run: a restart replayed the whole log, so its time grew with the
/// escrow's age (41 s at nonce 18 000 with 2 000 open inferences). Now the escrow writes a state
/// checkpoint every `checkpoint_every` nonces and a respawn replays only the diffs after it; the
/// respawned escrow is at the same nonce and root, and the hosts take its next diffs.
#[actix_rt::test]
async fn hour_long_run_a_respawn_replays_only_the_diffs_after_the_newest_checkpoint() {
    tokio::time::pause();
    let mut cfg = SimConfig::with_seed("checkpoint");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    let escrow_cfg = devshard_actors::escrow::EscrowConfig {
        checkpoint_every: 20,
        ..Default::default()
    };
    let store = std::sync::Arc::new(devshard_actors::store::MemoryStore::new());
    let h = Harness::start_with(cfg, store, escrow_cfg).await;
    let restores = |from: &str| h.metrics.escrow_restores.with_label_values(&[from]).get();
    assert_eq!(
        (restores("log"), restores("checkpoint")),
        (1, 0),
        "a fresh escrow"
    );
    for i in 0..30 {
        let a = h
            .chat(Harness::body(&format!("before {i}"), i % 2 == 0))
            .await;
        assert!(a.is_success(), "{a:?}");
    }
    // The 1 s tick writes the checkpoint.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(h.metrics.escrow_checkpoints.get() >= 1);
    let before = h.snapshot("42").await;
    h.directory
        .send(InjectPanicInto {
            kind: ActorKind::Escrow,
            id: "42".into(),
        })
        .await
        .unwrap()
        .unwrap();
    h.wait_alive(ActorKind::Escrow, "42").await;
    assert_eq!(restores("checkpoint"), 1, "respawned from the checkpoint");
    let after = h.snapshot("42").await;
    assert_eq!(
        (after.nonce, &after.state_root),
        (before.nonce, &before.state_root)
    );
    for i in 0..5 {
        let a = h.chat(Harness::body(&format!("after {i}"), true)).await;
        assert!(
            a.is_success(),
            "the hosts take the respawned escrow's diffs: {a:?}"
        );
    }
}
