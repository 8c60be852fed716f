//! Last-known-good snapshots: one failed poll changes nothing; a snapshot older than its bound
//! (5 × its interval) is reported stale in the view, the metrics and to subscribers, and only
//! then does admission stop trusting it. Also: phase gating in both modes from a held PoC.

use std::{collections::BTreeSet, time::Duration};

use devshard_actors::chain::{
    admission, Admission, ChainChange, ChainPollSettings, PhaseKind, PocMode,
};

use crate::{
    harness::{paused_clock, Polling},
    upstream::{epoch_body, participants_body, Reply, Upstream},
};

const LATEST: &str = "/v1/epochs/latest";
const PARTICIPANTS: &str = "/v1/epochs/current/participants";

fn stale_changes(p: &Polling, endpoint: &str) -> (usize, usize) {
    let changes = p.changes();
    let count = |want_stale: bool| {
        changes
            .iter()
            .filter(|(_, c)| match c {
                ChainChange::BecameStale { endpoint: e, .. } => want_stale && *e == endpoint,
                ChainChange::BecameFresh { endpoint: e, .. } => !want_stale && *e == endpoint,
                _ => false,
            })
            .count()
    };
    (count(true), count(false))
}

#[actix_rt::test]
async fn one_failed_poll_changes_nothing_and_only_staleness_changes_routing() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = Upstream::start(clock.clone()).await;
    let miners = Upstream::start(clock.clone()).await;
    // PoC generation at height 1000; the raw PoC ends at 1060 (60 blocks ≈ 360 s at 6 s).
    up.set(
        LATEST,
        Reply::ok(epoch_body(1_000, "PoCGenerate", 10, 990, 1_060)),
    );
    up.set(
        PARTICIPANTS,
        Reply::ok(participants_body(&[
            ("gonka1a", &miners.url, true),
            ("gonka1b", &miners.url, false),
        ])),
    );
    miners.set("/v1/versions", Reply::ok(r#"{"mlnodes":[]}"#));
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock.clone());
    tokio::time::sleep(Duration::from_secs(30)).await;

    let v = p.view().await;
    let now = clock.now_ms();
    let before = admission(&v, PocMode::Off, "m", now);
    match &before {
        Admission::Refuse {
            retry_after_s,
            phase,
            message,
        } => {
            assert_eq!(*phase, PhaseKind::PoC);
            assert!((300..=360).contains(retry_after_s), "{retry_after_s}");
            assert_eq!(
                message,
                "devshard temporarily unavailable during PoC generation"
            );
        }
        other => panic!("{other:?}"),
    }
    let only_a = Admission::ServeOnly {
        preserved: BTreeSet::from(["gonka1a".to_owned()]),
        phase: PhaseKind::PoC,
    };
    assert_eq!(admission(&v, PocMode::Relaxed, "m", now), only_a);
    let observed = v.epoch.as_ref().unwrap().observed_at_ms;

    // One failed poll.
    up.push(LATEST, Reply::status(500));
    tokio::time::sleep(Duration::from_secs(25)).await;
    let v = p.view().await;
    let now = clock.now_ms();
    let status = v.endpoint("epochs_latest").unwrap();
    assert_eq!(status.last_status.as_deref(), Some("500"));
    assert_eq!(status.consecutive_failures, 1);
    assert!(!status.stale);
    assert_eq!(v.epoch.as_ref().unwrap().observed_at_ms, observed, "kept");
    assert!(matches!(
        admission(&v, PocMode::Off, "m", now),
        Admission::Refuse { .. }
    ));
    assert_eq!(admission(&v, PocMode::Relaxed, "m", now), only_a);
    assert_eq!(stale_changes(&p, "epochs_latest"), (0, 0));
    let failed = [("endpoint", "epochs_latest"), ("status", "500")];
    assert_eq!(p.metric("chain_poll_requests_total", &failed), 1.0);

    // The API keeps failing: the last good snapshot is used until it is 100 s old …
    up.set(LATEST, Reply::status(500));
    let last_ok = status.last_ok_ms.unwrap();
    let wait = last_ok + 95_000 - clock.now_ms();
    tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    let v = p.view().await;
    assert!(!v.endpoint("epochs_latest").unwrap().stale);
    assert!(matches!(
        admission(&v, PocMode::Off, "m", clock.now_ms()),
        Admission::Refuse { .. }
    ));
    assert_eq!(
        p.metric("chain_snapshot_stale", &[("endpoint", "epochs_latest")]),
        0.0
    );

    // … and stale after that: reported, counted, logged, and routing no longer trusts it.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let v = p.view().await;
    let status = v.endpoint("epochs_latest").unwrap();
    assert!(status.stale);
    assert!(status.age_ms.unwrap() > 100_000);
    assert_eq!(
        admission(&v, PocMode::Off, "m", clock.now_ms()),
        Admission::Serve
    );
    assert_eq!(
        p.metric("chain_snapshot_stale", &[("endpoint", "epochs_latest")]),
        1.0
    );
    let stale_total = [("endpoint", "epochs_latest")];
    assert_eq!(p.metric("chain_snapshot_stale_total", &stale_total), 1.0);
    assert!(
        p.metric(
            "chain_snapshot_age_seconds",
            &[("endpoint", "epochs_latest")]
        ) > 100.0
    );
    assert_eq!(stale_changes(&p, "epochs_latest"), (1, 0));
    let pushed = p.latest.lock().unwrap().clone().unwrap();
    assert!(
        pushed.endpoint("epochs_latest").unwrap().stale,
        "subscribers saw it"
    );

    // The API recovers (in the inference phase now): fresh again.
    up.set(
        LATEST,
        Reply::ok(epoch_body(1_100, "Inference", 10, 990, 1_060)),
    );
    tokio::time::sleep(Duration::from_secs(25)).await;
    let v = p.view().await;
    assert!(!v.endpoint("epochs_latest").unwrap().stale);
    assert_eq!(stale_changes(&p, "epochs_latest"), (1, 1));
    assert_eq!(
        p.metric("chain_snapshot_stale", &[("endpoint", "epochs_latest")]),
        0.0
    );
    assert_eq!(
        admission(&v, PocMode::Off, "m", clock.now_ms()),
        Admission::Serve
    );
    // Participants and versions never went stale.
    assert_eq!(stale_changes(&p, "participants"), (0, 0));
    assert_eq!(stale_changes(&p, "versions"), (0, 0));
}

#[actix_rt::test]
async fn relaxed_mode_readmits_validation_capable_miners_from_fresh_versions() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = Upstream::start(clock.clone()).await;
    let miners = Upstream::start(clock.clone()).await;
    up.set(
        LATEST,
        Reply::ok(epoch_body(1_050, "PoCValidate", 10, 990, 1_060)),
    );
    up.set(
        PARTICIPANTS,
        Reply::ok(participants_body(&[
            ("gonka1a", &miners.url, true),
            ("gonka1b", &miners.url, false),
        ])),
    );
    miners.set(
        "/v1/versions",
        Reply::ok(r#"{"mlnodes":[{"node_id":"gonka1b-n","poc_validation_inference":true}]}"#),
    );
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock.clone());
    tokio::time::sleep(Duration::from_secs(40)).await;
    let v = p.view().await;
    assert_eq!(v.versions.len(), 2, "both miners' versions fetched");
    let both = BTreeSet::from(["gonka1a".to_owned(), "gonka1b".to_owned()]);
    assert_eq!(
        admission(&v, PocMode::Relaxed, "m", clock.now_ms()),
        Admission::ServeOnly {
            preserved: both,
            phase: PhaseKind::PoC
        }
    );
    // Another model has no preserved host: refused even in relaxed mode.
    assert!(matches!(
        admission(&v, PocMode::Relaxed, "other", clock.now_ms()),
        Admission::Refuse { .. }
    ));
}
