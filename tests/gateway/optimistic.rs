//! Optimistic catch-up (issue 16), in paused time over real loopback HTTP: with many requests in
//! flight, each diff travels to a host once (a request's body does not grow with the number in
//! flight), and a body that overtakes the one carrying the diffs before it (jittered links make
//! requests to one host arrive out of order) gets the host's nonce gap and is sent again from
//! what the host holds: every request is served, no host is blamed.

use devshard_gateway::sim::{LatencyProfile, Profile, SimConfig};
use futures::future::join_all;

use super::{fidelity::no_hedging, harness::Harness};

const HOSTS: usize = 3;
const IN_FLIGHT: usize = 120;

#[actix_rt::test]
async fn bodies_stay_small_with_120_in_flight_and_overtaken_ones_are_sent_again() {
    tokio::time::pause();
    let mut cfg = SimConfig::with_seed("optimistic-catch-up");
    cfg.hosts = HOSTS;
    cfg.profile = Profile::Zero;
    let h = Harness::start(cfg).await;
    no_hedging(&h).await;
    let jittery = LatencyProfile {
        rtt_ms: 40,
        jitter: 0.9,
        ..LatencyProfile::zero()
    };
    for i in 0..HOSTS {
        h.sim.set_latency(i, jittery.clone()).unwrap();
    }
    for round in 0..3 {
        let answers = join_all(
            (0..IN_FLIGHT)
                .map(|i| h.chat(Harness::body(&format!("round {round} request {i}"), false))),
        )
        .await;
        let failed: Vec<_> = answers.iter().filter(|a| !a.is_success()).collect();
        assert!(failed.is_empty(), "{failed:?}");
    }
    let first = h.metrics.catch_up_diffs.with_label_values(&["first"]);
    let sends = first.get_sample_count();
    assert!(sends >= (3 * IN_FLIGHT) as u64, "{sends} first sends");
    let mean = first.get_sample_sum() / sends as f64;
    // Each host gets its own nonce's diff and the others' since its last request: about HOSTS.
    // Re-sending everything unacknowledged would carry about IN_FLIGHT.
    assert!(
        mean <= 2.0 * HOSTS as f64,
        "mean diffs per request {mean:.1}"
    );
    let resends = |r: &str| h.metrics.gap_resends.with_label_values(&[r]).get();
    assert!(
        resends("ok") > 0,
        "no body overtook another: the test proves nothing"
    );
    assert_eq!(resends("failed"), 0);
    let resent = h.metrics.catch_up_diffs.with_label_values(&["resend"]);
    assert_eq!(resent.get_sample_count(), resends("ok"));
    eprintln!(
        "{sends} requests: mean {mean:.2} diffs per first send; {} resends (mean {:.1} diffs)",
        resends("ok"),
        resent.get_sample_sum() / resent.get_sample_count().max(1) as f64
    );
    for i in 0..HOSTS {
        let record = h.participant(&h.host(i)).await;
        assert!(
            !record
                .outcomes
                .contains_key(&devshard_actors::outcome::OutcomeClass::HostFault),
            "host {i} blamed: {:?}",
            record.outcomes
        );
    }
    let rewinds = h
        .metrics
        .host_sync_rewinds
        .with_label_values(&["nonce_gap"]);
    assert_eq!(
        rewinds.get(),
        0,
        "a resend that fits never rewinds the sync point"
    );
}
