//! The repair loop (docs/health.md §6, invariant 11): a diverged participant is withheld in its escrow
//! only, gets exactly one repair actor, receives no inference until a signature over our root is
//! verified, and is unblocked by nothing else.

use std::time::Duration;

use devshard_actors::{
    directory::RemoveEscrow,
    escrow::messages::{SyncHosts, TriggerRepair},
};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::Harness;

fn sim() -> SimConfig {
    let mut cfg = SimConfig::with_seed("repair");
    cfg.hosts = 7;
    cfg.profile = Profile::Zero;
    cfg
}

/// Inferences executed by slot `slot` after nonce `after`, as an independent host records them.
fn inferences_on(h: &Harness, slot: u64, after: u64) -> Vec<u64> {
    let view = h.sim.host_view(0, "42").expect("host 0 session");
    (after + 1..=view.latest_nonce)
        .filter(|n| n % 7 == slot && view.state.record(*n).is_some())
        .collect()
}

#[actix_rt::test]
async fn a_host_that_only_lied_once_is_repaired_by_a_verified_signature() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    // Nonce 1 → host 1 reports a wrong state hash once.
    h.sim
        .set_faults(
            1,
            Faults {
                wrong_state_hash: true,
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(
        h.chat(Harness::body("diverges", true)).await.is_success(),
        "the race moves on"
    );
    let snap = h.snapshot("42").await;
    assert_eq!(snap.repairs, vec![h.host(1).to_string()]);
    assert!(
        snap.pending_timeouts.contains(&1),
        "the diverging nonce still gets timeout handling: {snap:?}"
    );
    // First tick after 2 s: catch-up + a signature over our root → unblocked.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let snap = h.snapshot("42").await;
    assert!(snap.repairs.is_empty(), "unblocked: {snap:?}");
    assert_eq!(h.metrics.repair_unblock_seconds.get_sample_count(), 1);
    println!(
        "time to unblock: {:.1} s",
        h.metrics.repair_unblock_seconds.get_sample_sum()
    );
    // It receives user traffic again.
    let before = h.snapshot("42").await.nonce;
    for i in 0..14 {
        assert!(h
            .chat(Harness::body(&format!("after {i}"), true))
            .await
            .is_success());
    }
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    assert!(
        !inferences_on(&h, 1, before).is_empty(),
        "host 1 executes inferences again"
    );
}

#[actix_rt::test]
async fn a_forked_host_gets_no_inference_until_it_restarts_empty_and_proves_our_root() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    // Host 2 forks at nonce 2 and stays forked (its catch-up answers are 200s or root mismatches,
    // never a signature over our root).
    h.sim
        .set_faults(
            2,
            Faults {
                fork_from_nonce: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
    for i in 0..3 {
        assert!(h
            .chat(Harness::body(&format!("r{i}"), true))
            .await
            .is_success());
    }
    assert_eq!(h.snapshot("42").await.repairs, vec![h.host(2).to_string()]);
    let blocked_at = h.snapshot("42").await.nonce;
    for round in 0..6 {
        for i in 0..7 {
            assert!(h
                .chat(Harness::body(&format!("round {round} {i}"), true))
                .await
                .is_success());
        }
        tokio::time::sleep(Duration::from_secs(70)).await;
        assert_eq!(
            h.snapshot("42").await.repairs,
            vec![h.host(2).to_string()],
            "still blocked"
        );
    }
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    assert!(
        inferences_on(&h, 2, blocked_at).is_empty(),
        "no inference reached the forked host"
    );
    assert!(
        h.metrics
            .repair_attempts
            .with_label_values(&["not_yet"])
            .get()
            >= 3
    );
    // The host restarts empty: the next tick replays from nonce 1 and verifies its signature.
    h.sim
        .set_faults(
            2,
            Faults {
                forget_session: true,
                ..Default::default()
            },
        )
        .unwrap();
    let addr = h.escrow_addr("42").await;
    for _ in 0..3 {
        assert!(
            addr.send(TriggerRepair {
                participant: h.host(2)
            })
            .await
            .unwrap()
                || h.snapshot("42").await.repairs.is_empty()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        if h.snapshot("42").await.repairs.is_empty() {
            break;
        }
    }
    assert!(
        h.snapshot("42").await.repairs.is_empty(),
        "unblocked after the host restarted empty"
    );
    let before = h.snapshot("42").await.nonce;
    for i in 0..14 {
        assert!(h
            .chat(Harness::body(&format!("healed {i}"), true))
            .await
            .is_success());
    }
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    assert!(
        !inferences_on(&h, 2, before).is_empty(),
        "host 2 serves again"
    );
}

#[actix_rt::test]
async fn one_repair_actor_per_participant_and_none_after_the_escrow_is_removed() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    h.sim
        .set_faults(
            1,
            Faults {
                wrong_state_hash: true,
                ..Default::default()
            },
        )
        .unwrap();
    // Two rounds of nonces in flight at once: nonces 1 and 8 both land on host 1.
    let answers =
        futures::future::join_all((0..14).map(|i| h.chat(Harness::body(&format!("c{i}"), true))))
            .await;
    assert!(answers.iter().all(|a| a.is_success()));
    assert_eq!(h.snapshot("42").await.repairs.len(), 1);
    assert_eq!(
        h.metrics.repairs_active.get(),
        1,
        "exactly one repair actor"
    );
    // Other hosts keep serving and stay healthy and in sync.
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    let snap = h.snapshot("42").await;
    for i in [0usize, 2, 3, 4, 5, 6] {
        assert_eq!(
            h.sim.host_view(i, "42").unwrap().latest_nonce,
            snap.nonce,
            "host {i} in sync"
        );
    }
    h.directory
        .send(RemoveEscrow {
            escrow_id: "42".into(),
            purge: false,
        })
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        h.metrics.repairs_active.get(),
        0,
        "no repair actor outlives its escrow"
    );
}

#[actix_rt::test]
async fn after_giving_up_the_host_is_charged_normally_until_an_admin_forgets_it() {
    use devshard_actors::{
        directory::{AdminParticipants, ParticipantOp, SetHealthSettings},
        policy::settings::HealthSettings,
        protocol::state::InferenceStatus,
    };
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    let quick = HealthSettings {
        repair_give_up_ms: 60_000,
        ..HealthSettings::default()
    };
    h.directory
        .send(SetHealthSettings(quick))
        .await
        .unwrap()
        .unwrap();
    h.sim
        .set_faults(
            2,
            Faults {
                fork_from_nonce: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
    for i in 0..3 {
        assert!(h
            .chat(Harness::body(&format!("r{i}"), true))
            .await
            .is_success());
    }
    // Ticks at 2 s, 15 s, 30 s, 60 s: past 60 s the repair gives up.
    tokio::time::sleep(Duration::from_secs(200)).await;
    let snap = h.snapshot("42").await;
    assert_eq!(
        snap.repairs_given_up,
        vec![h.host(2).to_string()],
        "{snap:?}"
    );
    let before = snap.nonce;
    for i in 0..14 {
        assert!(h
            .chat(Harness::body(&format!("after give-up {i}"), true))
            .await
            .is_success());
    }
    // The forked host's nonces now carry (never sent) inferences, settled by refused-timeout votes.
    tokio::time::sleep(Duration::from_secs(120)).await;
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    let charged = inferences_on(&h, 2, before);
    assert!(!charged.is_empty(), "charged normally after give-up");
    let view = h.sim.host_view(0, "42").unwrap();
    assert!(charged.iter().all(|n| view
        .state
        .record(*n)
        .is_some_and(|r| r.status == InferenceStatus::TimedOut)));
    h.directory
        .send(AdminParticipants {
            address: Some(h.host(2)),
            op: ParticipantOp::Forget,
        })
        .await
        .unwrap()
        .unwrap();
    let snap = h.snapshot("42").await;
    assert!(
        snap.repairs_given_up.is_empty() && snap.repairs.is_empty(),
        "forget lifts the block: {snap:?}"
    );
}
