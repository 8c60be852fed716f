//! Timeout votes (issue 18, and two chaos findings), in paused time over real loopback HTTP:
//! - 20 unfinished nonces of a dead executor get their timeouts in about one protocol deadline:
//!   several votes collect at once, each asking every verifier in parallel (asked one nonce and
//!   one verifier at a time, 20 nonces × 2 verifiers on a 10 s link took 400 s);
//! - finding: a refused-timeout vote short of quorum was never asked again (the nonce stayed open
//!   on every host) — now it is, with back-off;
//! - finding: after a wrong state hash the executor's ConfirmStart reached us through its mempool,
//!   yet the nonce was put to a *refused* vote that every verifier rejected (its record is
//!   Started) — now the reason follows the record and the execution timeout is confirmed;
//! - finding (seed 2624105436825454089): a finish sequenced by a confirmed timeout's diff never
//!   left the book, and the final drain waited for it forever.

use std::time::Duration;

use devshard_actors::{
    escrow::{
        messages::{BeginDrain, SyncHosts},
        EscrowConfig,
    },
    protocol::state::{InferenceStatus, SessionConfig},
};
use devshard_gateway::sim::{Faults, LatencyProfile, Profile, SimConfig};
use futures::future::join_all;

use super::{
    fidelity::no_hedging,
    harness::{escrow_info, Harness},
};

pub(super) fn sim(seed: &str) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg.session_config = Some(SessionConfig::default_for_group(3));
    cfg
}

/// Refusal timeout + the default `timeout_buffer_ms`.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(60 + 5);

/// The simulator index of the host executing `nonce`.
pub(super) fn executor(h: &Harness, nonce: u64) -> usize {
    let info = escrow_info(&h.sim, "42");
    let addr = info.host_for_nonce(nonce).unwrap().address.clone();
    h.sim
        .hosts()
        .iter()
        .position(|x| x.address == addr)
        .unwrap()
}

pub(super) fn timeouts(h: &Harness, result: &str) -> u64 {
    h.metrics.timeouts.with_label_values(&[result]).get()
}

/// Advances virtual time in 1 s steps until `done` or `limit` passed; the time it took.
pub(super) async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = tokio::time::Instant::now();
    while !done() && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    start.elapsed()
}

/// A host that never answers before the receipt timeout: its attempts fail, the race retries
/// elsewhere and its nonces wait for refused timeouts.
pub(super) fn dead() -> Faults {
    Faults {
        stall_before_receipt_ms: Some(3_600_000),
        ..Default::default()
    }
}

/// 60 concurrent requests while the executor of nonce 1 never answers: each is served by
/// another host and at least 20 of that executor's nonces stay open. Returns how many (and the
/// dead host's index) and when the requests started.
pub(super) async fn dead_executor_backlog(h: &Harness) -> (u64, usize, tokio::time::Instant) {
    no_hedging(h).await;
    let dead_host = executor(h, 1);
    h.sim.set_faults(dead_host, dead()).unwrap();
    let start = tokio::time::Instant::now();
    let answers = join_all((0..60).map(|i| h.chat(Harness::body(&format!("q{i}"), false)))).await;
    assert!(answers.iter().all(|a| a.is_success()), "{answers:?}");
    let open = h.snapshot("42").await.pending_timeouts.len() as u64;
    assert!(open >= 20, "{open} unfinished nonces of the dead executor");
    (open, dead_host, start)
}

/// Waits (at most `limit`) until `open` timeouts are confirmed; how long it took.
pub(super) async fn all_confirmed(h: &Harness, open: u64, limit: Duration) -> Duration {
    let took = wait_until(limit, || timeouts(h, "confirmed") >= open).await;
    assert_eq!(timeouts(h, "confirmed"), open, "every timeout confirmed");
    took
}

#[actix_rt::test]
async fn twenty_unfinished_nonces_of_a_dead_executor_get_their_timeouts_in_about_one_deadline() {
    tokio::time::pause();
    let h = Harness::start(sim("dead-executor")).await;
    let (open, dead_host, start) = dead_executor_backlog(&h).await;
    // Both verifiers on a slow link from now on: every vote answer takes 10 s.
    for i in (0..3).filter(|i| *i != dead_host) {
        let slow = LatencyProfile {
            rtt_ms: 10_000,
            ..LatencyProfile::zero()
        };
        h.sim.set_latency(i, slow).unwrap();
    }
    let deadline = REFUSAL_DEADLINE.saturating_sub(start.elapsed());
    tokio::time::sleep(deadline).await;
    let took = all_confirmed(&h, open, Duration::from_secs(900)).await;
    assert!(
        took <= REFUSAL_DEADLINE,
        "all {open} timeouts within one deadline after it passed, took {took:?}"
    );
    assert!(h.snapshot("42").await.pending_timeouts.is_empty());
}

#[actix_rt::test]
async fn a_refused_timeout_vote_short_of_quorum_is_asked_again_with_back_off() {
    tokio::time::pause();
    let h = Harness::start(sim("short-of-quorum")).await;
    no_hedging(&h).await;
    let dead_host = executor(&h, 1);
    h.sim.set_faults(dead_host, dead()).unwrap();
    assert!(h.chat(Harness::body("q", false)).await.is_success());
    let voter = (0..3).find(|i| *i != dead_host).unwrap();
    let down = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    h.sim.set_faults(voter, down).unwrap();
    let retries = || {
        h.metrics
            .timeout_vote_retries
            .with_label_values(&["refused"])
            .get()
    };
    wait_until(Duration::from_secs(300), || retries() >= 1).await;
    assert_eq!(retries(), 1, "one round short: one verifier is down");
    assert_eq!(timeouts(&h, "insufficient"), 1);
    h.sim.clear_faults(voter).unwrap();
    wait_until(Duration::from_secs(300), || timeouts(&h, "confirmed") >= 1).await;
    assert_eq!(timeouts(&h, "confirmed"), 1, "confirmed on a later round");
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    let host = (0..3).find(|i| *i != dead_host && *i != voter).unwrap();
    let view = h.sim.host_view(host, "42").unwrap();
    assert_eq!(
        view.state.record(1).map(|r| r.status),
        Some(InferenceStatus::TimedOut)
    );
}

#[actix_rt::test]
async fn after_a_wrong_state_hash_the_timeout_reason_follows_the_record_and_is_confirmed() {
    tokio::time::pause();
    let h = Harness::start(sim("wrong-hash-record")).await;
    no_hedging(&h).await;
    let nonce = 1;
    let bad = executor(&h, nonce);
    // A wrong state hash on its receipt, then the connection drops: the host confirmed the start
    // (its ConfirmStart waits in its mempool) and never finishes.
    let once = Faults {
        wrong_state_hash: true,
        drop_after_receipt: true,
        times: Some(1),
        ..Default::default()
    };
    h.sim.set_faults(bad, once).unwrap();
    assert!(h.chat(Harness::body("first", false)).await.is_success());
    let peer = (0..3).find(|i| *i != bad).unwrap();
    let status = || {
        h.sim
            .host_view(peer, "42")
            .and_then(|v| v.state.record(nonce).map(|r| r.status))
    };
    // The host is repaired and serves again; its mempool brings its ConfirmStart of `nonce`.
    for i in 0..40 {
        if status() == Some(InferenceStatus::Started) {
            break;
        }
        assert!(h
            .chat(Harness::body(&format!("more {i}"), false))
            .await
            .is_success());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        status(),
        Some(InferenceStatus::Started),
        "precondition: the record is Started through a mempool, not our receipt"
    );
    wait_until(Duration::from_secs(1_500), || {
        timeouts(&h, "confirmed") >= 1
    })
    .await;
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    assert_eq!(status(), Some(InferenceStatus::TimedOut));
    assert_eq!(
        timeouts(&h, "insufficient"),
        0,
        "no vote asked the wrong question"
    );
}

/// Found by the chaos runner at seed 2624105436825454089 (invariant 7: the final drain started
/// with 2 unsettled nonces, one was timed out by vote, the other never settled). A finished
/// nonce leaves the book once the diff sequencing its finish is durable; the diff a confirmed
/// timeout goes out in awaited its durability inside the send, so the durable nonce never
/// advanced past it and a finish that diff sequenced (queued, waiting for the next diff) stayed
/// in the book until some other diff's ack — during a drain, none. Here: a request refused by
/// its executor and answered by the next host, whose finish stays queued (the finish's own diff
/// is 10 minutes away) until the refused nonce's timeout diff takes it.
#[actix_rt::test]
async fn seed_2624105436825454089_a_finish_sequenced_by_a_timeout_diff_leaves_the_book() {
    tokio::time::pause();
    let mut cfg = sim("finish-in-a-timeout-diff");
    let mut session = SessionConfig::default_for_group(3);
    session.refusal_timeout = 10;
    cfg.session_config = Some(session);
    let escrow_cfg = EscrowConfig {
        finish_poll_initial_ms: 600_000,
        ..EscrowConfig::default()
    };
    let h = Harness::start_escrow(cfg, escrow_cfg).await;
    let refused = h.snapshot("42").await.nonce + 1;
    let refuse = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    h.sim.set_faults(executor(&h, refused), refuse).unwrap();
    let a = h.chat(Harness::body("refused, then answered", false)).await;
    assert!(a.is_success(), "{a:?}");
    assert_eq!(h.snapshot("42").await.pending_timeouts, vec![refused]);
    // Refusal deadline (10 s) + the buffer (5 s) + the vote.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let escrow = h.escrow_addr("42").await;
    assert!(h.snapshot("42").await.pending_timeouts.is_empty());
    let progress = escrow.send(BeginDrain).await.unwrap();
    assert_eq!(progress.unsettled, 0, "every nonce settled: {progress:?}");
}

/// The hour-long chaos run: after each restart, ≈ 70 timeout votes a second fell to a few, and
/// votes missed their deadline by a minute. Every vote asked every verifier with the whole
/// catch-up it lacked, so a verifier far below the diff window (ejected: it gets no diffs) was
/// sent hundreds of diffs read back from the store and encoded, for every nonce. Now a first
/// round asks the verifiers whose catch-up memory holds, when their weight can pass alone. Here
/// the verifier behind refuses connections (it gets no diffs), as a host down for minutes.
#[actix_rt::test]
async fn hour_long_run_a_verifier_far_below_the_window_is_not_sent_its_catch_up_in_every_vote() {
    tokio::time::pause();
    let mut cfg = SimConfig::with_seed("behind-verifier");
    cfg.hosts = 5;
    cfg.profile = Profile::Zero;
    cfg.session_config = Some(SessionConfig::default_for_group(5));
    let escrow = EscrowConfig {
        diff_window: 64,
        ..EscrowConfig::default()
    };
    let h = Harness::start_escrow(cfg, escrow).await;
    no_hedging(&h).await;
    let dead_host = executor(&h, 1);
    let behind = (0..5).find(|i| *i != dead_host).unwrap();
    // The verifier falls far behind: it refuses connections (no nonces but probes, no diffs).
    let down = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    h.sim.set_faults(behind, down).unwrap();
    h.sim.set_faults(dead_host, dead()).unwrap();
    let answers = join_all((0..80).map(|i| h.chat(Harness::body(&format!("q{i}"), false)))).await;
    assert!(answers.iter().all(|a| a.is_success()), "{answers:?}");
    let open = h.snapshot("42").await.pending_timeouts.len() as u64;
    assert!(open >= 10, "{open} unfinished nonces of the dead executor");
    let read_for_votes = || {
        h.metrics
            .diffs_from_store
            .with_label_values(&["vote"])
            .get()
    };
    let before = read_for_votes();
    wait_until(REFUSAL_DEADLINE * 3, || timeouts(&h, "confirmed") >= open).await;
    assert_eq!(timeouts(&h, "confirmed"), open, "every timeout confirmed");
    let snap = h.snapshot("42").await;
    eprintln!(
        "open {open}, behind {}, vote reads {}, nonce {}, syncs {:?}",
        h.metrics.timeout_voters_behind.get(),
        read_for_votes() - before,
        snap.nonce,
        snap.host_sync
    );
    assert!(
        h.metrics.timeout_voters_behind.get() >= open,
        "the verifier behind was left out of each first round"
    );
    // Each vote reads back at most the diffs the near verifiers lack below the window (a few,
    // more while a burst of votes composes diffs fast); the far one would need ≈ 170 each time.
    let read = read_for_votes() - before;
    assert!(
        read <= open * 100,
        "{read} diffs read back from the store for {open} votes"
    );
}

/// Two of four verifiers ≈ 300 nonces behind (they refused connections until just before the
/// deadline) and two near ones, which alone cannot pass: (votes, diffs read back for votes, diffs
/// read back for syncs).
async fn far_verifiers(diff_window: usize) -> (u64, u64, u64) {
    let mut cfg = SimConfig::with_seed("far-verifiers");
    cfg.hosts = 5;
    cfg.profile = Profile::Zero;
    cfg.session_config = Some(SessionConfig::default_for_group(5));
    let escrow = EscrowConfig {
        diff_window,
        ..EscrowConfig::default()
    };
    let h = Harness::start_escrow(cfg, escrow).await;
    no_hedging(&h).await;
    let dead_host = executor(&h, 1);
    let far: Vec<usize> = (0..5).filter(|i| *i != dead_host).take(2).collect();
    let down = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    for i in &far {
        h.sim.set_faults(*i, down.clone()).unwrap();
    }
    h.sim.set_faults(dead_host, dead()).unwrap();
    // A few requests one by one first: the refusing hosts are found unreachable (a burst granted
    // before any refusal was heard fails where the correlation guard stops a race whose two
    // hosts refused), then their nonces pass over them.
    for i in 0..10 {
        h.chat(Harness::body(&format!("w{i}"), false)).await;
    }
    let answers = join_all((0..150).map(|i| h.chat(Harness::body(&format!("q{i}"), false)))).await;
    let served = answers.iter().filter(|a| a.is_success()).count();
    assert!(served >= 140, "{served} of 150 served");
    for i in &far {
        h.sim.clear_faults(*i).unwrap();
    }
    let open = h.snapshot("42").await.pending_timeouts.len() as u64;
    assert!(open >= 10, "{open} unfinished nonces");
    let read = |path: &str| h.metrics.diffs_from_store.with_label_values(&[path]).get();
    all_confirmed(&h, open, REFUSAL_DEADLINE * 4).await;
    let (votes, syncs) = (read("vote"), read("sync"));
    eprintln!("far verifiers (window {diff_window}): {open} votes, vote reads {votes}, sync reads {syncs}");
    (open, votes, syncs)
}

/// The same run, later: three hosts restarted empty 55 000 nonces behind, so no vote could pass
/// without them, and every vote carried each of them its whole catch-up (160 000 diffs a vote,
/// 32 votes at once: the gateway grew past 2 GB). Now one vote at a time carries a far
/// verifier's catch-up, and its answer moves the verifier's catch-up point.
#[actix_rt::test]
async fn hour_long_run_far_verifiers_are_carried_by_one_vote_at_a_time() {
    tokio::time::pause();
    let (votes, read, _) = far_verifiers(64).await;
    assert!(
        read <= votes * 100,
        "{read} diffs read back for {votes} votes"
    );
}

/// … and a verifier further behind than a vote may carry (16 windows) is caught up once by a
/// sync, the round short meanwhile.
#[actix_rt::test]
async fn hour_long_run_verifiers_too_far_behind_for_a_vote_are_caught_up_once_by_a_sync() {
    tokio::time::pause();
    let (votes, read, syncs) = far_verifiers(16).await;
    assert!(
        syncs >= 200,
        "the far hosts were caught up by a sync: {syncs}"
    );
    assert!(
        read <= votes * 100,
        "{read} diffs read back for {votes} votes"
    );
}
