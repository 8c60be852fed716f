//! 429/503 handling: `Retry-After` in seconds and as an HTTP-date is honoured exactly for every
//! endpoint of the host; without it the back-off doubles to its cap (invariant 10, second half).

use std::time::Duration;

use devshard_actors::{
    chain::{ChainPollSettings, HostGates, StopPoller},
    clock::SharedClock,
};

use crate::{
    harness::{gaps, paused_clock, Polling, T0_MS},
    upstream::{epoch_body, http_date, participants_body, Reply, Upstream},
};

const LATEST: &str = "/v1/epochs/latest";
const PARTICIPANTS: &str = "/v1/epochs/current/participants";

async fn healthy_upstream(clock: SharedClock) -> Upstream {
    let up = Upstream::start(clock).await;
    up.set(
        LATEST,
        Reply::ok(epoch_body(1_000, "Inference", 10, 400, 470)),
    );
    up.set(PARTICIPANTS, Reply::ok(participants_body(&[])));
    up
}

/// Requests to the upstream (any path) strictly between `after` and `before`.
fn requests_between(up: &Upstream, after: i64, before: i64) -> Vec<(i64, String)> {
    up.log()
        .into_iter()
        .filter(|(t, _)| *t > after && *t < before)
        .collect()
}

#[actix_rt::test]
async fn retry_after_seconds_holds_every_request_to_the_host() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = healthy_upstream(clock.clone()).await;
    up.push(
        LATEST,
        Reply::ok(epoch_body(1_000, "Inference", 10, 400, 470)),
    );
    up.push(LATEST, Reply::status(503).header("Retry-After", "120"));
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock);
    tokio::time::sleep(Duration::from_secs(60)).await;

    let latest = up.times(LATEST);
    let t503 = latest[1];
    let host = up.url.trim_start_matches("http://").to_owned();
    let view = p.view().await;
    let gate = view.hosts.iter().find(|h| h.host == host).unwrap();
    assert_eq!(gate.backoff_until_ms, t503 + 120_000);
    assert!(gate.last_backoff_from_retry_after);
    assert!(p.metric("chain_poll_backoff_seconds", &[("host", &host)]) > 60.0);
    assert_eq!(
        p.metric(
            "chain_poll_requests_total",
            &[("endpoint", "epochs_latest"), ("status", "503")]
        ),
        1.0
    );

    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(
        requests_between(&up, t503, t503 + 120_000),
        vec![],
        "nothing reaches the host before the Retry-After deadline (participants neither)"
    );
    let latest = up.times(LATEST);
    // (Virtual time may move a millisecond while a request crosses loopback.)
    assert!(
        (t503 + 120_000..t503 + 120_050).contains(&latest[2]),
        "the phase poll resumes at the deadline"
    );
    assert!(
        up.times(PARTICIPANTS).iter().any(|&t| t > t503 + 120_000),
        "participants resume too"
    );
    assert_eq!(
        p.metric("chain_poll_backoff_seconds", &[("host", &host)]),
        0.0
    );
}

#[actix_rt::test]
async fn retry_after_http_date_is_honoured() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = healthy_upstream(clock.clone()).await;
    // The very first phase poll (at T0) is told to come back at T0 + 120 s, as a date.
    let deadline = T0_MS + 120_000;
    up.push(
        LATEST,
        Reply::status(429).header("Retry-After", http_date(deadline)),
    );
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock);
    tokio::time::sleep(Duration::from_secs(400)).await;

    let latest = up.times(LATEST);
    let t429 = latest[0];
    assert!(t429 < T0_MS + 50);
    assert_eq!(requests_between(&up, t429, deadline), vec![]);
    assert!(
        (deadline..deadline + 50).contains(&latest[1]),
        "next phase poll at the date"
    );
    assert_eq!(
        p.metric(
            "chain_poll_requests_total",
            &[("endpoint", "epochs_latest"), ("status", "429")]
        ),
        1.0
    );
    // Polling is back to its interval afterwards.
    for g in gaps(&latest[1..]) {
        assert!((18_000..=22_000).contains(&g), "gap {g}");
    }
}

#[actix_rt::test]
async fn a_run_of_503s_without_retry_after_backs_off_exponentially_to_the_cap() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = Upstream::start(clock.clone()).await;
    up.set(LATEST, Reply::status(503));
    up.set(PARTICIPANTS, Reply::status(503));
    let p = Polling::start(&up.url, ChainPollSettings::default(), clock);
    tokio::time::sleep(Duration::from_secs(3 * 3_600)).await;

    let mut times: Vec<i64> = up.log().into_iter().map(|(t, _)| t).collect();
    times.dedup(); // the two endpoints' first polls leave together at T0
    let g = gaps(&times);
    assert!(g.len() >= 10, "{g:?}");
    assert!(g[0] >= 30_000, "{g:?}");
    for w in g.windows(2) {
        assert!(
            w[1] >= (2 * w[0]).min(600_000) - 50,
            "each 503 at least doubles the wait: {g:?}"
        );
        assert!(w[1] <= 600_050, "capped at 600 s: {g:?}");
    }
    assert!((600_000..600_050).contains(&g[g.len() - 1]), "{g:?}");
    let view = p.view().await;
    assert!(view.hosts[0].backoff_level >= 10);
    assert!(!view.hosts[0].last_backoff_from_retry_after);
    assert!(view.epoch.is_none(), "never a snapshot from a 503");
}

#[actix_rt::test]
async fn a_restarted_poller_still_honours_the_retry_after_deadline() {
    tokio::time::pause();
    let clock = paused_clock();
    let up = healthy_upstream(clock.clone()).await;
    up.push(LATEST, Reply::status(503).header("Retry-After", "120"));
    let settings = ChainPollSettings::default();
    let gates = HostGates::new(&settings);
    let first = Polling::start_with_gates(&up.url, settings.clone(), clock.clone(), gates.clone());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t503 = up.times(LATEST)[0];
    first.poller.send(StopPoller).await.unwrap();
    // A new poller (a restart) with the process's gates: its first poll waits for the deadline.
    let _second = Polling::start_with_gates(&up.url, settings, clock, gates);
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(requests_between(&up, t503, t503 + 120_000), vec![]);
    let latest = up.times(LATEST);
    assert!(
        (t503 + 120_000..t503 + 120_050).contains(&latest[1]),
        "{latest:?}"
    );
}
