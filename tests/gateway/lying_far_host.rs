//! Chaos, the seed of `e9cc4bc`'s hash (invariant 3): every host lied about its state hash for
//! 4 s. Four were withheld for repair; the fifth, restarted empty 5 600 diffs behind, was caught
//! up in the background. Its rounds were all refused, each ended the catch-up and its next
//! nonce began another (≈ 100 rounds a second); after the clear the recovery probe waited 2.1 s
//! for that host's catch-up, while the four repairs waited for their 15 s back-off.

use std::time::Duration;

use devshard_gateway::sim::{Faults, LatencyProfile};

use super::{
    harness::{Answer, Harness},
    reach::{catch_ups, fill},
};

/// Three hosts (catch-ups of more than 100 diffs in the background), 300 requests served, then
/// hosts 1 and 2 lie about their state hash and host 0 restarts empty behind a `far_rtt_ms`
/// round trip (and lies too when `far_lies`).
async fn two_liars_and_one_far(far_lies: bool, far_rtt_ms: u64) -> Harness {
    let h = catch_ups(3, 100).await;
    fill(&h, 300).await;
    let far_link = LatencyProfile {
        rtt_ms: far_rtt_ms,
        ..LatencyProfile::zero()
    };
    h.sim.set_latency(0, far_link).unwrap();
    let far = Faults {
        wrong_state_hash: far_lies,
        forget_session: true,
        ..Default::default()
    };
    h.sim.set_faults(0, far).unwrap();
    let liar = Faults {
        wrong_state_hash: true,
        ..Default::default()
    };
    for host in [1, 2] {
        h.sim.set_faults(host, liar.clone()).unwrap();
    }
    h
}

/// 20 concurrent requests: they meet hosts 1 and 2, which are withheld for repair, and host 0,
/// whose background catch-up starts; they wait for it.
async fn burst(h: &Harness) {
    let requests = (0..20).map(|i| h.chat(Harness::body(&format!("meets a liar {i}"), false)));
    futures::future::join_all(requests).await;
}

/// Four clients sending requests back to back for `length` (virtual time), as the chaos
/// runner's load does: some always wait for a nonce.
async fn load(h: &Harness, length: Duration) {
    let start = tokio::time::Instant::now();
    let client = |c: usize| async move {
        let mut i = 0;
        while start.elapsed() < length {
            let _ = h.chat(Harness::body(&format!("load {c} {i}"), false)).await;
            i += 1;
        }
    };
    futures::future::join_all((0..4).map(client)).await;
}

fn rounds(h: &Harness) -> u64 {
    ["background_started", "background_failed"]
        .iter()
        .map(|l| h.metrics.reach.with_label_values(&[l]).get())
        .sum()
}

#[actix_rt::test]
async fn e9cc4bc_a_far_host_whose_answers_are_all_refused_is_not_caught_up_in_a_hot_loop() {
    tokio::time::pause();
    // A 20 ms round trip: each round takes virtual time, so a loop of them lets the clock move.
    let h = two_liars_and_one_far(true, 20).await;
    let before = rounds(&h);
    let (_, during) = futures::join!(load(&h, Duration::from_secs(4)), async {
        tokio::time::sleep(Duration::from_secs(4)).await;
        rounds(&h) - before
    });
    eprintln!("background rounds in 4 s while host 0 lied: {during}");
    let repairs = h.snapshot("42").await.repairs;
    for host in [1, 2] {
        assert!(repairs.contains(&h.host(host).to_string()), "{repairs:?}");
    }
    // Before: 172 rounds in these 4 s, each ending the catch-up and the next nonce beginning
    // another. Now 250 ms, then doubling: 0.25 + 0.5 + 1 + 2 s, so about five rounds.
    assert!(during <= 8, "{during} rounds in 4 s");
}

#[actix_rt::test]
async fn e9cc4bc_with_the_only_other_host_catching_up_the_repairs_tick_at_once_after_a_clear() {
    tokio::time::pause();
    // Host 0's catch-up of 300 diffs, in chunks of 20 over a 2 s round trip, takes about 30 s.
    let h = two_liars_and_one_far(false, 2_000).await;
    let after_the_clear = async {
        // The repairs' first ticks (2 s) find hosts 1 and 2 still lying.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(h.snapshot("42").await.repairs.len(), 2, "still withheld");
        for host in [1, 2] {
            h.sim.clear_faults(host).unwrap();
        }
        let start = tokio::time::Instant::now();
        let answer = h.chat(Harness::body("after the clear", false)).await;
        (answer, start.elapsed())
    };
    let ((), (answer, took)) = futures::join!(burst(&h), after_the_clear);
    assert!(
        matches!(answer, Answer::Whole(_)),
        "served after the clear: {answer:?}"
    );
    // Before, the repairs waited for their 15 s back-off, host 0's catch-up took 30 s, and the
    // request was answered 503 `hosts_catching_up` after `reach_catch_up_wait_ms` (5 s).
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
}
