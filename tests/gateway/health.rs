//! Host health end to end (docs/health.md §1–§2, seed 000): shared faults change no host's health and
//! fail fast with a clear cause; forget/unquarantine of everyone lets the next request succeed;
//! probation with no Healthy host still serves; host-borne faults on 2 of 7 hosts eject exactly
//! those 2, and they come back through probation.

use std::time::Duration;

use devshard_actors::{
    directory::{AdminParticipants, ListParticipants, ParticipantOp},
    policy::health::HealthState,
};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::{Answer, Harness};

fn seven() -> SimConfig {
    let mut cfg = SimConfig::with_seed("health");
    cfg.hosts = 7;
    cfg.profile = Profile::Zero;
    cfg
}

async fn states(h: &Harness) -> Vec<(String, String, f64)> {
    let mut v: Vec<_> = h
        .directory
        .send(ListParticipants)
        .await
        .unwrap()
        .iter()
        .map(|p| (p.address.to_string(), p.state.to_string(), p.strikes))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

async fn health_of(h: &Harness, i: usize) -> (String, HealthState) {
    let views = h.directory.send(ListParticipants).await.unwrap();
    let v = views
        .iter()
        .find(|p| p.address == h.host(i))
        .expect("participant known")
        .clone();
    (v.state.to_string(), v.record.health.clone())
}

/// The reasons of host `i`'s last strikes (`recent_strikes`, what the admin listing shows).
async fn strikes_of(h: &Harness, i: usize) -> Vec<&'static str> {
    let views = h.directory.send(ListParticipants).await.unwrap();
    let v = views.iter().find(|p| p.address == h.host(i)).unwrap();
    v.record
        .recent_strikes
        .iter()
        .map(|s| s.reason.as_str())
        .collect()
}

async fn warm_up(h: &Harness, n: usize) {
    for i in 0..n {
        assert!(h
            .chat(Harness::body(&format!("warm {i}"), true))
            .await
            .is_success());
    }
}

/// One shared fault on every host: no health change (not even after the correlation window), a
/// fast failure naming the cause, and the next request succeeds once the fault is gone.
async fn shared_fault(name: &str, faults: Faults, status: u16, cause: &str) {
    let h = Harness::start(seven()).await;
    warm_up(&h, 3).await;
    let before = states(&h).await;
    let nonce_before = h.snapshot("42").await.nonce;
    h.sim.set_all_faults(faults);
    let a = h.chat(Harness::body(name, true)).await;
    let Answer::Failed(e) = a else {
        panic!("{name}: expected a failure, got {a:?}")
    };
    assert_eq!(e.status, status, "{name}: {e:?}");
    assert!(
        e.message.contains(cause),
        "{name}: the message names the cause: {}",
        e.message
    );
    let used = h.snapshot("42").await.nonce - nonce_before;
    assert!(
        used <= 2,
        "{name}: fails fast, two hosts at most ({used} nonces)"
    );
    tokio::time::sleep(Duration::from_secs(40)).await;
    let after = states(&h).await;
    for ((a, sa, _), (_, sb, strikes)) in before.iter().zip(&after) {
        assert_eq!((sa, *strikes), (sb, 0.0), "{name}: {a} unchanged");
    }
    h.sim.clear_all_faults();
    assert!(
        h.chat(Harness::body("after", true)).await.is_success(),
        "{name}: next request succeeds"
    );
}

/// Seed 000, every case of one shared fault on every host (each in its own actor system, as
/// separate tests would be): the client's status and the cause its message names.
#[test]
fn seed000_every_host_failing_the_same_way() {
    let status = |s: u16| Faults {
        http_status: Some(s),
        ..Default::default()
    };
    let unreachable = Faults {
        refuse_connections: true,
        ..Default::default()
    };
    let cases = [
        ("403", status(403), 502, "escrow owner"),
        ("404", status(404), 502, "route"),
        ("401", status(401), 502, "clock"),
        ("503", status(503), 503, "overloaded"),
        ("unreachable", unreachable, 502, "reached"),
    ];
    for (name, faults, status, cause) in cases {
        actix_rt::System::new().block_on(async move {
            tokio::time::pause();
            shared_fault(name, faults, status, cause).await;
        });
    }
}

#[actix_rt::test]
async fn after_everyone_is_ejected_forget_all_serves_the_next_request() {
    tokio::time::pause();
    let h = Harness::start(seven()).await;
    warm_up(&h, 2).await;
    h.directory
        .send(AdminParticipants {
            address: None,
            op: ParticipantOp::ForceEject,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(states(&h).await.iter().all(|(_, s, _)| s == "ejected"));
    // Panic mode: with no routable host the least-bad hosts are raced anyway.
    assert!(h.chat(Harness::body("panic mode", true)).await.is_success());
    h.directory
        .send(AdminParticipants {
            address: None,
            op: ParticipantOp::Forget,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(states(&h).await.iter().all(|(_, s, _)| s == "healthy"));
    assert!(h
        .chat(Harness::body("after forget", true))
        .await
        .is_success());
    // Unquarantine also serves at once (hosts go to probation, which is a preference only).
    h.directory
        .send(AdminParticipants {
            address: None,
            op: ParticipantOp::ForceEject,
        })
        .await
        .unwrap()
        .unwrap();
    h.directory
        .send(AdminParticipants {
            address: None,
            op: ParticipantOp::Unquarantine,
        })
        .await
        .unwrap()
        .unwrap();
    assert!(states(&h).await.iter().all(|(_, s, _)| s == "probation"));
    assert!(h
        .chat(Harness::body("after unquarantine", true))
        .await
        .is_success());
}

#[actix_rt::test]
async fn probation_with_no_healthy_host_still_serves_and_hosts_recover() {
    tokio::time::pause();
    let h = Harness::start(seven()).await;
    warm_up(&h, 2).await;
    h.directory
        .send(AdminParticipants {
            address: None,
            op: ParticipantOp::ForceEject,
        })
        .await
        .unwrap()
        .unwrap();
    // Ejections expire (30 s ± 20 %) into probation; nobody is Healthy.
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(
        states(&h).await.iter().all(|(_, s, _)| s == "probation"),
        "{:?}",
        states(&h).await
    );
    for i in 0..42 {
        let a = h
            .chat(Harness::body(&format!("probation {i}"), i % 2 == 0))
            .await;
        assert!(a.is_success(), "suspect winners are crowned: {a:?}");
    }
    // Each host finished at least two attempts: all Healthy again.
    let s = states(&h).await;
    assert!(s.iter().all(|(_, st, _)| st == "healthy"), "{s:?}");
}

async fn two_bad_hosts(faults: Faults, label: &str, struck_for: &[&str]) {
    let h = Harness::start(seven()).await;
    warm_up(&h, 3).await;
    h.sim.set_faults(2, faults.clone()).unwrap();
    h.sim.set_faults(5, faults).unwrap();
    // Spread over 3 s of virtual time: a host that refuses connections gets nonces only as
    // probes, one per `reach_probe_interval_ms` (`escrow/reach/mod.rs`), so its strikes come at
    // that pace.
    for i in 0..30 {
        let a = h.chat(Harness::body(&format!("{label} {i}"), true)).await;
        assert!(a.is_success(), "{label}: requests still succeed: {a:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..7 {
        let (state, health) = health_of(&h, i).await;
        if i == 2 || i == 5 {
            // Ejected (or, when the faulty attempts themselves took long, already back on
            // probation after the ejection expired — and re-ejected at its next fault).
            assert!(
                state == "ejected" || state == "probation",
                "{label}: host {i} ejected, is {state}"
            );
            assert!(health.ejections >= 1, "{label}: host {i} was ejected");
            let reasons = strikes_of(&h, i).await;
            assert!(
                !reasons.is_empty() && reasons.iter().all(|r| struck_for.contains(r)),
                "{label}: host {i}'s strikes say why: {reasons:?}"
            );
        } else {
            assert_eq!(state, "healthy", "{label}: host {i} untouched");
            assert!(strikes_of(&h, i).await.is_empty(), "{label}: host {i}");
        }
    }
    // Healed: after the ejection, probation, then Healthy after two finished attempts each.
    h.sim.clear_faults(2).unwrap();
    h.sim.clear_faults(5).unwrap();
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(health_of(&h, 2).await.0, "probation", "{label}");
    for i in 0..30 {
        assert!(h
            .chat(Harness::body(&format!("{label} healed {i}"), true))
            .await
            .is_success());
    }
    for i in [2, 5] {
        assert_eq!(
            health_of(&h, i).await.0,
            "healthy",
            "{label}: host {i} back"
        );
    }
}

#[actix_rt::test]
async fn refusing_hosts_are_ejected_and_return_through_probation() {
    tokio::time::pause();
    two_bad_hosts(
        Faults {
            refuse_connections: true,
            ..Default::default()
        },
        "refuse",
        &["connect_failed"],
    )
    .await;
}

#[actix_rt::test]
async fn empty_streams_while_peers_succeed_eject_exactly_those_hosts() {
    tokio::time::pause();
    two_bad_hosts(
        Faults {
            empty_stream: true,
            ..Default::default()
        },
        "empty",
        &["empty_stream"],
    )
    .await;
}

#[actix_rt::test]
async fn stalled_winners_are_ejected_at_once_and_return_through_probation() {
    tokio::time::pause();
    let f = Faults {
        stall_after_chunks: Some(2),
        stall_ms: Some(3_600_000),
        ..Default::default()
    };
    two_bad_hosts(f, "stalled", &["stalled"]).await;
}
