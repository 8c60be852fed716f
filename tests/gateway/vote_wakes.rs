//! Timeout votes short of quorum are asked again early when what kept them short is gone, in
//! paused time over real loopback HTTP (`actor/voting.rs` `hasten_short_votes`):
//! - finding (the rotating hour-long run, run H: escrow 112's drain and the burst of 100 late
//!   timeouts): votes short of quorum during the faults waited out back-offs of up to 300 s
//!   after their verifiers were back, and a draining escrow's settlement waits on them. While
//!   the escrow drains, a vote is now asked again at least every `timeout_vote_retry_ms`;
//! - a verifier that refused connections and answers again wakes the votes it kept short;
//! - finding (run I): a verifier that restarted empty answered every vote with an error, and
//!   nothing found out what it held; a round with a verifier's error now kicks a sync.

use std::time::Duration;

use devshard_actors::escrow::messages::{BeginDrain, SyncHosts};
use devshard_gateway::sim::Faults;

use super::{
    fidelity::no_hedging,
    harness::Harness,
    timeout_votes::{dead, executor, sim, timeouts, wait_until},
};

fn down() -> Faults {
    Faults {
        refuse_connections: true,
        ..Default::default()
    }
}

fn retries(h: &Harness) -> u64 {
    h.metrics
        .timeout_vote_retries
        .with_label_values(&["refused"])
        .get()
}

fn hastened(h: &Harness, why: &str) -> u64 {
    h.metrics
        .timeout_votes_hastened
        .with_label_values(&[why])
        .get()
}

/// Nonce 1's executor dead, a verifier down: nonce 1's refused-timeout vote falls short
/// `rounds` times (back-offs 10, 20, 40 … s). Returns the dead host and the verifier.
async fn short_rounds(h: &Harness, rounds: u64) -> (usize, usize) {
    no_hedging(h).await;
    let dead_host = executor(h, 1);
    h.sim.set_faults(dead_host, dead()).unwrap();
    assert!(h.chat(Harness::body("q", false)).await.is_success());
    let voter = (0..3).find(|i| *i != dead_host).unwrap();
    h.sim.set_faults(voter, down()).unwrap();
    wait_until(Duration::from_secs(900), || retries(h) >= rounds).await;
    assert_eq!(
        retries(h),
        rounds,
        "{rounds} rounds short: one verifier is down"
    );
    assert_eq!(timeouts(h, "confirmed"), 0);
    (dead_host, voter)
}

#[actix_rt::test]
async fn rotating_long_run_a_draining_escrow_asks_backed_off_votes_again_within_the_retry_interval()
{
    tokio::time::pause();
    let h = Harness::start(sim("drain-wakes-votes")).await;
    // Five rounds short: the next is 160 s away.
    let (_, voter) = short_rounds(&h, 5).await;
    h.sim.clear_faults(voter).unwrap();
    let escrow = h.escrow_addr("42").await;
    let progress = escrow.send(BeginDrain).await.unwrap();
    assert!(progress.unsettled >= 1, "nonce 1 holds the drain");
    assert_eq!(hastened(&h, "draining"), 1);
    let took = wait_until(Duration::from_secs(300), || timeouts(&h, "confirmed") >= 1).await;
    assert_eq!(timeouts(&h, "confirmed"), 1);
    assert!(
        took <= Duration::from_secs(12),
        "asked again within timeout_vote_retry_ms (10 s) of the drain, took {took:?}"
    );
    let progress = escrow.send(BeginDrain).await.unwrap();
    assert_eq!((progress.waiting, progress.unsettled), (0, 0), "drained");
}

#[actix_rt::test]
async fn a_verifier_that_answers_again_wakes_the_votes_it_kept_short() {
    tokio::time::pause();
    let h = Harness::start(sim("reachable-wakes-votes")).await;
    let (dead_host, voter) = short_rounds(&h, 3).await;
    // Requests meet the verifier refusing connections: it is unreachable for the escrow.
    let reach = |event: &str| h.metrics.reach.with_label_values(&[event]).get();
    let mut sent = 0;
    while reach("host_unreachable") == 0 && sent < 12 {
        let _ = h.chat(Harness::body(&format!("a{sent}"), false)).await;
        sent += 1;
    }
    assert!(
        reach("host_unreachable") >= 1,
        "the verifier was found down"
    );
    // Its back-off is now 40 s or more; it comes back and a probe reaches it.
    h.sim.clear_faults(voter).unwrap();
    h.sim.clear_faults(dead_host).unwrap();
    let mut sent = 0;
    while reach("host_reachable") == 0 && sent < 12 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = h.chat(Harness::body(&format!("b{sent}"), false)).await;
        sent += 1;
    }
    assert!(reach("host_reachable") >= 1, "a probe reached it");
    assert!(hastened(&h, "host_reachable") >= 1);
    let took = wait_until(Duration::from_secs(300), || timeouts(&h, "confirmed") >= 1).await;
    assert!(timeouts(&h, "confirmed") >= 1);
    assert!(
        took <= Duration::from_secs(3),
        "asked again once the verifier answered, took {took:?}"
    );
}

/// Every host holds the escrow's state, the next nonce's executor is dead and one request
/// leaves it open (a refused-timeout vote follows); `before_restart` runs, then the other
/// verifier restarts empty at its next request. Returns the harness.
async fn voter_restarts_empty(seed: &str, before_restart: impl AsyncFnOnce(&Harness)) -> Harness {
    let h = Harness::start(sim(seed)).await;
    no_hedging(&h).await;
    for i in 0..6 {
        assert!(h
            .chat(Harness::body(&format!("w{i}"), false))
            .await
            .is_success());
    }
    let next = h.snapshot("42").await.nonce + 1;
    let dead_host = executor(&h, next);
    h.sim.set_faults(dead_host, dead()).unwrap();
    assert!(h.chat(Harness::body("q", false)).await.is_success());
    before_restart(&h).await;
    let voter = (0..3).find(|i| *i != dead_host).unwrap();
    let restart = Faults {
        forget_session: true,
        ..Default::default()
    };
    h.sim.set_faults(voter, restart).unwrap();
    h
}

/// Run I (seed `long-1`, 97 s): an execution timeout stayed at weight 2 of 3 for a minute while
/// two verifiers that had restarted empty answered every vote with an error ("inference not
/// found"): the escrow still counted them near, asked them again each round, and nothing
/// found out what they held. A round with a verifier's error now kicks a sync, which rewinds
/// it, and the next round carries its catch-up.
#[actix_rt::test]
async fn rotating_long_run_a_verifier_that_restarted_empty_is_caught_up_for_the_next_round() {
    tokio::time::pause();
    let h = voter_restarts_empty("verifier-restarted-empty", async |_| {}).await;
    let took = wait_until(Duration::from_secs(900), || timeouts(&h, "confirmed") >= 1).await;
    assert_eq!(
        timeouts(&h, "confirmed"),
        1,
        "confirmed once the verifier is caught up"
    );
    // The refusal deadline (65 s), then at most one round short before the sync.
    assert!(
        took <= Duration::from_secs(65 + 15),
        "confirmed {took:?} after the restart ({} rounds short)",
        retries(&h)
    );
}

/// Run J (seed `long-1`, 1 225 s): a draining escrow's verifiers restarted empty after its last
/// diff. Every sync point still said "in sync", so each sync a failed round kicked sent nothing,
/// the verifiers answered every vote "inference not found" from a fresh session, and five
/// execution timeouts stayed unconfirmed for minutes (invariant 4). A sync kicked by a failed
/// round now sends the latest diff again to hosts in sync by their sync point: the restarted
/// verifier answers with its nonce gap, is rewound and caught up, and the next round passes.
#[actix_rt::test]
async fn run_j_a_verifier_that_restarted_empty_after_the_last_diff_is_found_by_the_kicked_sync() {
    tokio::time::pause();
    // Everything sequenced and every live host in sync before the restart: no diff is
    // composed after it.
    let h = voter_restarts_empty("verifier-restarted-after-the-last-diff", async |h| {
        h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    })
    .await;
    let took = wait_until(Duration::from_secs(600), || timeouts(&h, "confirmed") >= 1).await;
    assert_eq!(
        timeouts(&h, "confirmed"),
        1,
        "never confirmed: the verifier's sync point still says it holds everything"
    );
    assert!(
        took <= Duration::from_secs(65 + 30),
        "confirmed {took:?} after the restart ({} rounds short)",
        retries(&h)
    );
}

/// Run J (seed `long-1`, 3 430 s): a host that restarted empty after a draining escrow's last
/// diff was reported in sync at 10 125 by every admin sync for 40 minutes while it held nothing
/// (invariant 1): with no diff composed since, the sync had nothing to send it. The admin sync
/// now sends the latest diff again to hosts in sync by their sync point, so the first finds the
/// host's gap and the second catches it up.
#[actix_rt::test]
async fn run_j_an_admin_sync_finds_a_host_that_restarted_empty_after_the_last_diff() {
    tokio::time::pause();
    let h = Harness::start(sim("admin-sync-finds-a-restarted-host")).await;
    for i in 0..6 {
        assert!(h
            .chat(Harness::body(&format!("w{i}"), false))
            .await
            .is_success());
    }
    // Syncs until nothing is left to sequence: no diff is composed after the restart.
    let escrow = h.escrow_addr("42").await;
    let mut before = 0;
    while h.snapshot("42").await.nonce != before {
        before = h.snapshot("42").await.nonce;
        escrow.send(SyncHosts).await.unwrap();
    }
    let restart = Faults {
        forget_session: true,
        ..Default::default()
    };
    h.sim.set_faults(1, restart).unwrap();
    h.sim.clear_faults(1).unwrap();
    for _ in 0..2 {
        escrow.send(SyncHosts).await.unwrap();
    }
    let nonce = h.snapshot("42").await.nonce;
    assert_eq!(nonce, before, "no diff was composed after the restart");
    let held = h.sim.host_view(1, "42").map_or(0, |v| v.latest_nonce);
    assert_eq!(held, nonce, "host 1 holds the escrow's state again");
}
