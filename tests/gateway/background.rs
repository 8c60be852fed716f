//! Background catch-up end to end (`escrow/actor/background.rs`, issue 12's hour-long run,
//! invariants 2 and 3): a host that lacks more than `reach_background_catch_up_diffs` diffs is
//! caught up by the escrow's own sync, never by a client's attempt; requests go to the other
//! hosts meanwhile, or, when none can serve, are answered 503 `hosts_catching_up` within
//! `reach_catch_up_wait_ms`.

use std::time::Duration;

use devshard_actors::race::RaceErrorKind;
use devshard_gateway::sim::LatencyProfile;

use super::{
    harness::{Answer, Harness},
    reach::{catch_ups, fill, restart_and_burst},
};

/// `hosts` hosts, catch-up chunks of 20 diffs, a window of 64, and any catch-up of more than
/// 100 diffs carried by a background sync; 300 requests served, then host `slow`'s link set to
/// round trips of `rtt_ms`.
async fn far_host_on_a_slow_link(hosts: usize, slow: usize, rtt_ms: u64) -> Harness {
    let h = catch_ups(hosts, 100).await;
    fill(&h, 300).await;
    let link = LatencyProfile {
        rtt_ms,
        ..LatencyProfile::zero()
    };
    h.sim.set_latency(slow, link).unwrap();
    h
}

/// Waits (virtual time, at most 2 min) for a background catch-up to end; `each` runs every
/// half second meanwhile.
async fn background_done(h: &Harness, mut each: impl AsyncFnMut()) {
    let done = h.metrics.reach.with_label_values(&["background_done"]);
    for _ in 0..240 {
        if done.get() >= 1 {
            return;
        }
        each().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the background catch-up did not end");
}

/// `host`'s sync point in the escrow's snapshot.
fn sync_of(snap: &devshard_actors::escrow::messages::EscrowSnapshot, host: &str) -> u64 {
    snap.host_sync
        .iter()
        .find(|(a, _)| a == host)
        .map_or(0, |(_, n)| *n)
}

/// Catch-up chunks sent on `path` (`attempt`, `sync`).
fn chunks(h: &Harness, path: &str) -> u64 {
    ["ok", "failed"]
        .iter()
        .map(|r| {
            h.metrics
                .catch_up_chunks
                .with_label_values(&[path, r])
                .get()
        })
        .sum()
}

/// The hour-long run (seed `long-1`, invariants 2 and 3): four hosts restarted empty far behind
/// and client requests were held by attempts whose catch-ups carried ≈ 120 000 diffs (46 s
/// and more each). Now a catch-up of more than `reach_background_catch_up_diffs` never rides a
/// client's attempt: the attempt that met the host's gap has its resend refused and goes to
/// another host, a background sync catches the host up, and it then takes nonces again.
#[actix_rt::test]
async fn seed_long_1_a_catch_up_beyond_the_bound_is_a_background_sync_and_no_client_waits_for_it() {
    tokio::time::pause();
    // Host 2's catch-up of 300 diffs, 15 chunks of 300 ms round trips, takes 4.5 s; its
    // first answers (the gaps) come before a hedge would win.
    let h = far_host_on_a_slow_link(5, 2, 300).await;
    let behind = h.snapshot("42").await.nonce;
    let resent = h.metrics.catch_up_diffs.with_label_values(&["resend"]);
    let answers = restart_and_burst(&h, 2).await;
    let failed = answers.iter().filter(|(a, _)| !a.is_success()).count();
    let slowest = answers.iter().map(|(_, t)| *t).max().unwrap_or_default();
    eprintln!("background catch-up: {failed} failed, slowest answer {slowest:?}");
    assert_eq!(failed, 0, "the other hosts serve every request");
    assert!(
        slowest < Duration::from_secs(3),
        "no request waited for the catch-up: {slowest:?}"
    );
    // Before, the attempt that met host 2's gap was sent again with every diff it lacked.
    assert!(
        resent.get_sample_sum() <= 100.0,
        "resends carried {} diffs",
        resent.get_sample_sum()
    );
    let started = h.metrics.reach.with_label_values(&["background_started"]);
    assert!(started.get() >= 1, "a background catch-up started");
    // The sync finishes on its own (virtual time), and the host takes nonces again.
    // Rounds of 10 chunks (200 diffs here) each take their answers in: the host's sync point
    // moves while the catch-up still runs, not once at its end.
    let host = h.host(2).to_string();
    let mut moved_midway = false;
    background_done(&h, async || {
        let snap = h.snapshot("42").await;
        let sync = sync_of(&snap, &host);
        moved_midway |= !snap.reach.catching_up.is_empty() && sync > 0 && sync < behind;
    })
    .await;
    assert!(moved_midway, "the sync point moved between rounds");
    assert!(
        chunks(&h, "sync") >= 300 / 20,
        "the sync carried the catch-up"
    );
    let snap = h.snapshot("42").await;
    let sync = sync_of(&snap, &host);
    assert!(sync >= behind, "host 2 caught up: {sync:?} of {behind}");
    assert!(
        snap.reach.catching_up.is_empty(),
        "{:?}",
        snap.reach.catching_up
    );
    fill(&h, 10).await;
}

/// The same with one host: no other host can serve, so requests are answered promptly (the
/// gap's attempt with an error, later ones 503 `hosts_catching_up` + `Retry-After` once they
/// waited `reach_catch_up_wait_ms`) instead of waiting 30 s for an attempt's catch-up, and are
/// served again once the background sync is over.
#[actix_rt::test]
async fn seed_long_1_with_no_other_host_requests_get_a_bounded_503_while_it_catches_up() {
    tokio::time::pause();
    let h = far_host_on_a_slow_link(1, 0, 2_000).await;
    let answers = restart_and_burst(&h, 0).await;
    let slowest = answers.iter().map(|(_, t)| *t).max().unwrap_or_default();
    assert!(slowest < Duration::from_secs(10), "slowest {slowest:?}");
    // While the sync runs, a new request waits at most `reach_catch_up_wait_ms` (5 s).
    let start = tokio::time::Instant::now();
    let later = h.chat(Harness::body("while catching up", false)).await;
    let waited = start.elapsed();
    match &later {
        Answer::Failed(f) => {
            assert_eq!(f.error.kind, RaceErrorKind::HostsCatchingUp, "{f:?}");
            assert_eq!(f.status, 503);
            assert!(f.error.retry_after_s.is_some_and(|s| s >= 1));
        }
        other => panic!("served while catching up: {other:?}"),
    }
    assert!(waited <= Duration::from_secs(6), "waited {waited:?}");
    background_done(&h, async || {}).await;
    assert!(h.chat(Harness::body("after", false)).await.is_success());
}
