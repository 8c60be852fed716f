//! Seed 002: a finish marker that arrives after the stream ended is a success, never a failure;
//! only a finish that never arrives becomes a host fault, and only after a confirmed timeout vote.

use std::time::Duration;

use devshard_actors::{
    directory::{ActorKind, InjectPanicInto},
    escrow::{messages::SyncHosts, EscrowConfig},
    outcome::OutcomeClass,
    protocol::state::{InferenceStatus, SessionConfig},
};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::{Answer, Harness};

fn sim() -> SimConfig {
    let mut cfg = SimConfig::with_seed("late-finish");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    let mut session = SessionConfig::default_for_group(3);
    session.execution_timeout = 60;
    session.refusal_timeout = 10;
    cfg.session_config = Some(session);
    cfg
}

/// The escrow crashes (its memory is lost, the store kept) and the directory respawns it from
/// the log, as after a `kill -9`.
async fn crash_escrow(h: &Harness) {
    h.directory
        .send(InjectPanicInto {
            kind: ActorKind::Escrow,
            id: "42".into(),
        })
        .await
        .unwrap()
        .unwrap();
    h.wait_alive(ActorKind::Escrow, "42").await;
}

/// A request whose nonce's host refuses connections, answered by another host: the nonce
/// awaits its refused-timeout vote (the refusals go on until the test clears them).
async fn refused_elsewhere(h: &Harness) -> u64 {
    let nonce = h.snapshot("42").await.nonce + 1;
    let refuse = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    h.sim.set_faults((nonce % 3) as usize, refuse).unwrap();
    assert!(h
        .chat(Harness::body("refused, then answered elsewhere", false))
        .await
        .is_success());
    assert_eq!(h.snapshot("42").await.pending_timeouts, vec![nonce]);
    nonce
}

/// After a sync, every host holds `nonce` settled (neither Pending nor Started).
async fn settled_on_every_host(h: &Harness, nonce: u64) {
    let snap = h.snapshot("42").await;
    assert!(
        snap.pending_timeouts.is_empty(),
        "{:?}",
        snap.pending_timeouts
    );
    assert!(
        snap.pending_finishes.is_empty(),
        "{:?}",
        snap.pending_finishes
    );
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    for i in 0..3 {
        let view = h.sim.host_view(i, "42").unwrap();
        let status = view.state.record(nonce).map(|r| r.status);
        assert!(
            !matches!(
                status,
                Some(InferenceStatus::Pending | InferenceStatus::Started)
            ),
            "host {i}: nonce {nonce} is {status:?}"
        );
    }
}

/// Found by the settlement kill -9 test (`tests/process/settle.rs`): a late finish settled its
/// nonce in the escrow's book as soon as it was absorbed, but it only becomes durable with the
/// next diff. A crash before that diff lost it (and the receipt's ConfirmStart); the restarted
/// escrow found the nonce Pending in its log, past its refusal deadline, and put it straight to
/// a refused-timeout vote without payload, which every host rejects: the nonce stayed open on
/// every host. Now the book keeps the nonce until its finish is durable, and the restored nonce
/// is reconciled from the executor's mempool (one last poll) before any vote.
#[actix_rt::test]
async fn a_finish_lost_with_a_crash_before_its_diff_is_reconciled_from_the_executor() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    let nonce = h.snapshot("42").await.nonce + 1;
    let executor = (nonce % 3) as usize;
    let late = Faults {
        late_finish_ms: Some(20_000),
        ..Default::default()
    };
    h.sim.set_faults(executor, late).unwrap();
    assert!(h
        .chat(Harness::body("late and lost", true))
        .await
        .is_success());
    assert_eq!(h.snapshot("42").await.pending_finishes, vec![nonce]);
    // The reconciliation poll after the finish appeared (t ≈ 31 s) absorbs it; no request
    // carries it into a diff.
    while !h.snapshot("42").await.pending_finishes.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    crash_escrow(&h).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    settled_on_every_host(&h, nonce).await;
    let record = h.participant(&h.host(executor)).await;
    assert_eq!(record.outcomes.get(&OutcomeClass::HostFault), None);
}

/// Found by the chaos runner at seed 12 (hundreds of "inference N is still pending … after its
/// refusal deadline"): a nonce whose host refused the request awaits a refused-timeout vote,
/// which verifiers accept only with the request's payload, kept in memory. After a `kill -9`
/// the restored nonce had none, every vote was rejected and the nonce stayed Pending on every
/// host. The payload is now persisted when the nonce goes on the refused path and given back to
/// the restored nonce.
#[actix_rt::test]
async fn seed_12_a_refused_nonce_restored_after_a_crash_is_timed_out_by_vote() {
    tokio::time::pause();
    let h = Harness::start(sim()).await;
    let nonce = refused_elsewhere(&h).await;
    let executor = (nonce % 3) as usize;
    crash_escrow(&h).await;
    // Refusal deadline (10 s) + the gateway's buffer (5 s) + the vote.
    tokio::time::sleep(Duration::from_secs(30)).await;
    h.sim.clear_faults(executor).unwrap();
    settled_on_every_host(&h, nonce).await;
    let view = h.sim.host_view((executor + 1) % 3, "42").unwrap();
    assert_eq!(
        view.state.record(nonce).map(|r| r.status),
        Some(InferenceStatus::TimedOut)
    );
}

/// Found by CI's chaos run of `c49679b` (seed 12, release build; invariant 4, eleven nonces
/// pending on their hosts 71 s past their deadline): timeout votes were confirmed 40 ms before a
/// `kill -9`, their queued timeouts not yet in a diff, and the 1 s tick deleted their payloads
/// meanwhile; the restarted escrow voted again without them, which every verifier refuses. A
/// nonce timed out by vote now keeps its payload until its timeout is durable
/// (`actors/src/escrow/book/payloads.rs`). Here the timeout waits 10 s for a diff to ride in,
/// and the crash comes 2.5 s after the vote: pending forever before, timed out after.
#[actix_rt::test]
async fn ci_c49679b_a_timeout_confirmed_just_before_a_crash_is_voted_again_with_its_payload() {
    tokio::time::pause();
    let escrow_cfg = EscrowConfig {
        timeout_tx_batch_ms: 10_000,
        ..EscrowConfig::default()
    };
    let h = Harness::start_escrow(sim(), escrow_cfg).await;
    let nonce = refused_elsewhere(&h).await;
    // Refusal deadline (10 s) + the gateway's buffer (5 s): the vote confirms, its tx is queued.
    for _ in 0..600 {
        if h.snapshot("42").await.pending_timeouts.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let snap = h.snapshot("42").await;
    assert!(snap.pending_timeouts.is_empty(), "the vote confirmed");
    assert_eq!(
        snap.pending_txs, 1,
        "the timeout is queued, not yet in a diff"
    );
    // Two ticks of the 1 s payload clean-up, then the crash.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    crash_escrow(&h).await;
    h.sim.clear_faults((nonce % 3) as usize).unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    settled_on_every_host(&h, nonce).await;
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
