//! Hosts that reject a request before any work are treated like hosts that refuse connections
//! (`escrow/reach/refusal.rs`; the rotating hour-long chaos run's invariant-3 finding): after
//! rounds of 429, 404 and 500 on every host the escrow had sequenced 2 000 nonces in 2 s, each
//! an inference only a refused-timeout vote settles, then 1 200 votes in 5 s, and no request
//! was picked for 4 s after the faults cleared. Now every host rejecting closes the gate: 503
//! `hosts_unreachable` naming what the hosts said, no nonce but one probe per interval, and the
//! first probe answered after the fault clears opens it again.

use devshard_gateway::sim::Faults;

use super::reach::{harness, served_after_clear, shared_outage};

fn status(s: u16) -> Faults {
    Faults {
        http_status: Some(s),
        ..Default::default()
    }
}

/// Every host answers `code` to 60 requests: the nonces they took with and without reach
/// tracking, and the requests answered `hosts_unreachable` with it.
async fn rejections(code: u16, says: &str) -> (u64, usize, u64) {
    let h = harness(true).await;
    let (used, unreachable) = shared_outage(&h, status(code), says).await;
    let snap = h.snapshot("42").await;
    assert!(
        snap.reach.gate_closed_since_ms.is_some(),
        "{:?}",
        snap.reach
    );
    assert!(
        snap.reach
            .refusing
            .iter()
            .all(|r| r.cause.as_str() != "connect_failed"),
        "{:?}",
        snap.reach
    );
    // The fault clears: a client that honours `Retry-After` is served at its first retry.
    h.sim.clear_all_faults();
    let served = served_after_clear(&h).await.is_some();
    assert!(served, "served after the clear");
    let untracked = harness(false).await;
    let (untracked_used, none) = shared_outage(&untracked, status(code), says).await;
    assert_eq!(none, 0);
    (used, unreachable, untracked_used)
}

#[actix_rt::test]
async fn rotating_long_run_hosts_all_answering_429_close_the_gate_instead_of_burning_nonces() {
    tokio::time::pause();
    let (used, unreachable, untracked) = rejections(429, "rejected requests").await;
    assert!(
        used <= 20,
        "{used} nonces for 60 requests every host rejected"
    );
    assert!(
        unreachable >= 50,
        "{unreachable} answered 503 hosts_unreachable"
    );
    assert!(untracked >= 60, "each took a nonce before: {untracked}");
}

#[actix_rt::test]
async fn hosts_that_do_not_know_the_escrow_close_the_gate_and_the_message_says_so() {
    tokio::time::pause();
    // The simulator's 500 says "escrow not found".
    let (used, unreachable, _) = rejections(500, "escrow does not exist").await;
    assert!(used <= 20, "{used} nonces");
    assert!(unreachable >= 50, "{unreachable}");
}
