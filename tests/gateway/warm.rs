//! Warm keys end to end (LIFECYCLE.md §5): hosts that sign with chain-granted warm keys are
//! served, streaming and not; the gateway binds the same keys at the same nonces as every host;
//! an ungranted key is an invalid signature that ejects that host only; an unreachable grants
//! endpoint charges and ejects nobody; a revocation after binding changes nothing.

use std::time::Duration;

use devshard_actors::{directory::ListParticipants, escrow::messages::SyncHosts};
use devshard_gateway::sim::{Faults, GrantsFault, Profile, SimConfig, WarmMode};

use super::harness::Harness;

fn warm(hosts: usize, mode: WarmMode) -> SimConfig {
    let mut cfg = SimConfig::with_seed("warm-gateway");
    cfg.hosts = hosts;
    cfg.profile = Profile::Zero;
    cfg.warm_keys = mode;
    cfg
}

/// Syncs every host and checks each is at the gateway's nonce and root with its bindings.
async fn roots_and_bindings_agree(h: &Harness) {
    h.escrow_addr("42").await.send(SyncHosts).await.unwrap();
    let snap = h.snapshot("42").await;
    for i in 0..h.sim.hosts().len() {
        let view = h.sim.host_view(i, "42").expect("host session");
        assert_eq!(view.latest_nonce, snap.nonce, "host {i} nonce");
        assert_eq!(
            hex::encode(view.state_root),
            snap.state_root,
            "host {i} root"
        );
        assert_eq!(view.state.warm_keys(), &snap.warm_keys, "host {i} bindings");
    }
}

async fn ejected(h: &Harness) -> Vec<String> {
    let views = h.directory.send(ListParticipants).await.unwrap();
    views
        .iter()
        .filter(|p| p.state == "ejected")
        .map(|p| p.address.to_string())
        .collect()
}

async fn strikes(h: &Harness) -> f64 {
    let views = h.directory.send(ListParticipants).await.unwrap();
    views.iter().map(|p| p.strikes).sum()
}

#[actix_rt::test]
async fn all_hosts_on_warm_keys_serve_100_requests_and_bind_like_the_hosts() {
    tokio::time::pause();
    let h = Harness::start(warm(5, WarmMode::All)).await;
    for i in 0..100 {
        let a = h
            .chat(Harness::body(&format!("warm {i}"), i % 2 == 0))
            .await;
        assert!(a.is_success(), "request {i}: {a:?}");
    }
    roots_and_bindings_agree(&h).await;
    let snap = h.snapshot("42").await;
    assert_eq!(
        snap.warm_keys.len(),
        5,
        "every slot bound: {:?}",
        snap.warm_keys
    );
    for (slot, key) in &snap.warm_keys {
        let host = *slot as usize;
        assert_eq!(
            Some(key),
            h.sim.hosts()[host].warm_key.as_ref().map(|k| k.address())
        );
    }
    assert!(ejected(&h).await.is_empty());
}

#[actix_rt::test]
async fn a_host_signing_with_an_ungranted_key_is_ejected_and_the_others_serve() {
    tokio::time::pause();
    let h = Harness::start(warm(5, WarmMode::All)).await;
    h.sim
        .set_faults(
            2,
            Faults {
                sign_with_ungranted_key: true,
                ..Faults::default()
            },
        )
        .unwrap();
    for i in 0..20 {
        let a = h.chat(Harness::body(&format!("req {i}"), i % 2 == 0)).await;
        assert!(a.is_success(), "request {i}: {a:?}");
    }
    assert_eq!(ejected(&h).await, [h.host(2).to_string()]);
    assert!(!h.snapshot("42").await.warm_keys.contains_key(&2));
}

#[actix_rt::test]
async fn an_unreachable_grants_endpoint_charges_and_ejects_nobody() {
    tokio::time::pause();
    // Hosts 0..3 on warm keys, 3..7 on cold keys.
    let h = Harness::start(warm(7, WarmMode::Count(3))).await;
    // Bind host 0's key first (nonce 7 is slot 0; its ConfirmStart rides in nonce 8), then cut
    // the grants endpoint.
    for i in 0..9 {
        assert!(h
            .chat(Harness::body(&format!("bind {i}"), true))
            .await
            .is_success());
    }
    assert!(h.snapshot("42").await.warm_keys.contains_key(&0));
    h.sim.set_grants_fault(GrantsFault {
        unreachable: true,
        ..GrantsFault::default()
    });
    for i in 0..30 {
        let a = h
            .chat(Harness::body(&format!("down {i}"), i % 2 == 0))
            .await;
        assert!(a.is_success(), "request {i}: {a:?}");
    }
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert!(ejected(&h).await.is_empty(), "nobody ejected");
    assert_eq!(strikes(&h).await, 0.0, "nobody charged");
    h.sim.set_grants_fault(GrantsFault::default());
    roots_and_bindings_agree(&h).await;
}

#[actix_rt::test]
async fn a_revocation_after_binding_changes_nothing() {
    tokio::time::pause();
    let h = Harness::start(warm(4, WarmMode::All)).await;
    for i in 0..12 {
        assert!(h
            .chat(Harness::body(&format!("bind {i}"), i % 2 == 0))
            .await
            .is_success());
    }
    roots_and_bindings_agree(&h).await;
    let bound = h.snapshot("42").await.warm_keys;
    assert_eq!(bound.len(), 4);
    for i in 0..4 {
        assert_eq!(h.sim.revoke_warm_grant(i).unwrap(), 1);
    }
    for i in 0..12 {
        let a = h
            .chat(Harness::body(&format!("revoked {i}"), i % 2 == 1))
            .await;
        assert!(a.is_success(), "request {i}: {a:?}");
    }
    roots_and_bindings_agree(&h).await;
    assert_eq!(h.snapshot("42").await.warm_keys, bound);
    assert!(ejected(&h).await.is_empty());
}
