//! Live settings (`ApplyPollSettings`: validated, applied without a restart and without a burst)
//! and single flight (reads never cause requests).

use std::time::Duration;

use devshard_actors::chain::{ApplyPollSettings, ChainPollSettings, GetSnapshot};

use crate::{
    harness::{gaps, paused_clock, Polling},
    upstream::{epoch_body, participants_body, Reply, Upstream},
};

const LATEST: &str = "/v1/epochs/latest";

#[actix_rt::test]
async fn settings_apply_live_without_a_burst_and_invalid_ones_are_refused() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = Upstream::start(clock.clone()).await;
    up.set(
        LATEST,
        Reply::ok(epoch_body(1_000, "Inference", 10, 400, 470)),
    );
    up.set(
        "/v1/epochs/current/participants",
        Reply::ok(participants_body(&[])),
    );
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock.clone());
    tokio::time::sleep(Duration::from_secs(65)).await;

    // Slower: the next phase poll comes one new interval after the last one.
    let last = *up.times(LATEST).last().unwrap();
    let slower = ChainPollSettings {
        chain_phase_poll_interval_ms: 40_000,
        ..ChainPollSettings::default()
    };
    p.poller
        .send(ApplyPollSettings(slower))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(200)).await;
    let after: Vec<i64> = up.times(LATEST).into_iter().filter(|&t| t > last).collect();
    assert!(after[0] - last >= 36_000, "{}", after[0] - last);
    for g in gaps(&after) {
        assert!((36_000..=44_000).contains(&g), "gap {g}");
    }

    // Faster: no burst at the moment of the change, then the new interval.
    let applied_at = clock.now_ms();
    let last = *up.times(LATEST).last().unwrap();
    let faster = ChainPollSettings {
        chain_phase_poll_interval_ms: 15_000,
        ..ChainPollSettings::default()
    };
    p.poller
        .send(ApplyPollSettings(faster.clone()))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;
    let after: Vec<i64> = up.times(LATEST).into_iter().filter(|&t| t > last).collect();
    assert!(
        after[0] - last >= 13_500,
        "one new interval after the last poll"
    );
    assert!(after[0] >= applied_at, "no poll was sent early");
    for g in gaps(&after) {
        assert!((13_500..=16_500).contains(&g), "gap {g}");
    }
    let view = p.view().await;
    assert_eq!(view.settings, faster);
    assert_eq!(view.endpoint("epochs_latest").unwrap().interval_ms, 15_000);

    // The reference's 5 s would need more than the budget: refused with the reason, nothing changes.
    let reference = ChainPollSettings {
        chain_phase_poll_interval_ms: 5_000,
        participants_poll_interval_ms: 5_000,
        ..ChainPollSettings::default()
    };
    let err = p
        .poller
        .send(ApplyPollSettings(reference))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        err.0.contains("public_api_requests_per_minute is 6"),
        "{err}"
    );
    assert_eq!(p.view().await.settings, faster);
}

#[actix_rt::test]
async fn many_readers_cause_no_requests() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = Upstream::start(clock.clone()).await;
    up.set(
        LATEST,
        Reply::ok(epoch_body(1_000, "Inference", 10, 400, 470)),
    );
    up.set(
        "/v1/epochs/current/participants",
        Reply::ok(participants_body(&[])),
    );
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = up.log().len();
    for _ in 0..1_000 {
        let v = p.poller.send(GetSnapshot).await.unwrap();
        assert_eq!(v.epoch_index(), Some(10));
    }
    assert_eq!(up.log().len(), before);
    assert_eq!(
        before, 2,
        "one phase poll and one participants poll at start"
    );
}
