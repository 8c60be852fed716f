//! Host reachability end to end (`escrow/reach.rs`; the hour-long chaos run's invariant-4
//! finding): a host that refuses connections gets no nonces but for probes, so the others serve
//! every request; while every host refuses, requests are answered 503 `hosts_unreachable` +
//! `Retry-After` without taking a nonce, but for one probe per interval; the first answer after
//! the fault clears opens the gate again. Without it, every request leaves an open inference
//! that only a timeout vote settles.

use std::{sync::Arc, time::Duration};

use devshard_actors::{escrow::EscrowConfig, race::RaceErrorKind, store::MemoryStore};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::{Answer, Harness};

const REQUESTS: usize = 60;

fn five() -> SimConfig {
    let mut cfg = SimConfig::with_seed("reach");
    cfg.hosts = 5;
    cfg.profile = Profile::Zero;
    cfg
}

async fn harness(tracking: bool) -> Harness {
    let cfg = EscrowConfig {
        reach_tracking: tracking,
        ..EscrowConfig::default()
    };
    Harness::start_with(five(), Arc::new(MemoryStore::new()), cfg).await
}

/// `REQUESTS` requests, one every 20 ms of virtual time, while every host refuses connections:
/// the nonces they took and how many were answered `hosts_unreachable`.
async fn outage(h: &Harness) -> (u64, usize) {
    for i in 0..3 {
        assert!(h
            .chat(Harness::body(&format!("warm {i}"), true))
            .await
            .is_success());
    }
    let before = h.snapshot("42").await.nonce;
    h.sim.set_all_faults(Faults {
        refuse_connections: true,
        ..Default::default()
    });
    let mut unreachable = 0;
    for i in 0..REQUESTS {
        match h
            .chat(Harness::body(&format!("outage {i}"), i % 2 == 0))
            .await
        {
            Answer::Failed(f) if f.error.kind == RaceErrorKind::HostsUnreachable => {
                assert_eq!(f.status, 503, "{f:?}");
                assert!(f.error.retry_after_s.is_some_and(|s| s >= 1), "{f:?}");
                assert!(f.message.contains("accepts connections"), "{}", f.message);
                unreachable += 1;
            }
            Answer::Failed(_) => {}
            other => panic!("no host is reachable, yet: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let used = h.snapshot("42").await.nonce - before;
    eprintln!("outage: {used} nonces, {unreachable} of {REQUESTS} answered hosts_unreachable");
    (used, unreachable)
}

#[actix_rt::test]
async fn hosts_refusing_connections_close_the_gate_and_the_first_answer_opens_it() {
    tokio::time::pause();
    let h = harness(true).await;
    let (used, unreachable) = outage(&h).await;
    // 1.2 s of virtual time: the requests before the gate closed (each tries two hosts before
    // the correlation guard stops it), then one probe per 250 ms, each trying two hosts.
    assert!(
        used <= 20,
        "{used} nonces for {REQUESTS} requests to hosts that refuse connections"
    );
    assert!(unreachable >= REQUESTS - 10, "{unreachable} answered 503");
    let snap = h.snapshot("42").await;
    assert!(
        snap.reach.gate_closed_since_ms.is_some(),
        "{:?}",
        snap.reach
    );
    assert_eq!(snap.reach.unreachable.len(), 5, "{:?}", snap.reach);
    assert!(snap.reach.probes >= 3, "{:?}", snap.reach);
    assert_eq!(
        h.metrics.reach.with_label_values(&["refused"]).get(),
        snap.reach.refused
    );
    // The fault clears: the next probe is answered and the gate opens; a client that honours
    // `Retry-After` is served at its first retry.
    h.sim.clear_all_faults();
    let mut served_after = None;
    for attempt in 0..3 {
        match h.chat(Harness::body("after", true)).await {
            Answer::Failed(f) if f.error.kind == RaceErrorKind::HostsUnreachable => {
                let wait = f.error.retry_after_s.unwrap_or(1);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            Answer::Failed(f) => panic!("after the clear: {f:?}"),
            _ => {
                served_after = Some(attempt);
                break;
            }
        }
    }
    assert!(served_after.is_some_and(|a| a <= 1), "{served_after:?}");
    let snap = h.snapshot("42").await;
    assert_eq!(snap.reach.gate_closed_since_ms, None, "{:?}", snap.reach);
    assert_eq!(h.metrics.reach.with_label_values(&["gate_opened"]).get(), 1);
}

#[actix_rt::test]
async fn without_reach_tracking_every_request_takes_nonces() {
    tokio::time::pause();
    let h = harness(false).await;
    let (used, unreachable) = outage(&h).await;
    assert_eq!(unreachable, 0);
    assert!(
        used >= REQUESTS as u64,
        "each request takes at least one nonce without reach tracking: {used}"
    );
}

#[actix_rt::test]
async fn two_hosts_of_five_refusing_get_no_nonces_and_the_others_serve_every_request() {
    tokio::time::pause();
    let h = harness(true).await;
    let refuse = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    h.sim.set_faults(1, refuse.clone()).unwrap();
    h.sim.set_faults(3, refuse).unwrap();
    let before = h.snapshot("42").await;
    for i in 0..40 {
        let a = h.chat(Harness::body(&format!("partial {i}"), true)).await;
        assert!(a.is_success(), "request {i}: {a:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let snap = h.snapshot("42").await;
    let r = &snap.reach;
    assert_eq!(r.refused, 0, "{r:?}");
    assert_eq!(r.unreachable.len(), 2, "{r:?}");
    assert!(r.withheld >= 10, "their nonces were passed over: {r:?}");
    // Only the probes (one per host per 250 ms, 1 s of virtual time) were granted to them.
    assert!(r.probes <= 10, "{r:?}");
    assert!(
        snap.unsettled <= before.unsettled + 12,
        "open inferences: {} before, {} after",
        before.unsettled,
        snap.unsettled
    );
}
