//! The straggler knob (`LatencyProfile::straggler_rate`, `straggler_delay_ms`), in virtual time:
//! about that share of requests stalls that long before the first token, on the plain OpenAI
//! route and on the devshard route (after the receipt), drawn from the host's seeded stream so a
//! run is reproducible.

use std::time::Duration;

use devshard_actors::protocol::sse::HostEvent;
use devshard_gateway::sim::LatencyProfile;
use futures::StreamExt;
use tokio::time::Instant;

use crate::client::{config, event_times, http, start, Session};

const DELAY_MS: u64 = 3_000;
const REQUESTS: usize = 400;

fn straggly(rate: f64) -> LatencyProfile {
    LatencyProfile {
        straggler_rate: rate,
        straggler_delay_ms: DELAY_MS,
        ..LatencyProfile::zero()
    }
}

/// Indices of the plain OpenAI requests (of `REQUESTS`, one after another) that straggled, and
/// the host's straggler counter.
async fn stragglers_of_a_run(seed: &str) -> (Vec<usize>, u64) {
    let mut cfg = config(1);
    cfg.seed = seed.to_string();
    let net = start(cfg).await;
    net.set_latency(0, straggly(0.05)).unwrap();
    let url = format!("{}/v1/chat/completions", net.hosts()[0].url);
    let client = http();
    let mut slow = Vec::new();
    for i in 0..REQUESTS {
        let body = format!(r#"{{"stream":true,"messages":[{{"role":"user","content":"s {i}"}}]}}"#);
        let t = Instant::now();
        let mut resp = client.post(&url).send_body(body).await.unwrap();
        assert!(resp.status().is_success());
        let first = resp.next().await.unwrap().unwrap();
        assert!(!first.is_empty());
        let ttfb = t.elapsed();
        while resp.next().await.is_some() {}
        if ttfb >= Duration::from_millis(DELAY_MS) {
            assert!(ttfb < Duration::from_millis(DELAY_MS + 50), "{ttfb:?}");
            slow.push(i);
        } else {
            assert!(ttfb < Duration::from_millis(50), "request {i}: {ttfb:?}");
        }
    }
    let counted = net.counters(0).unwrap().stragglers;
    net.shutdown();
    (slow, counted)
}

#[actix_rt::test]
async fn about_the_rate_of_requests_stall_and_the_same_seed_stalls_the_same_ones() {
    tokio::time::pause();
    let (slow, counted) = stragglers_of_a_run("stragglers-a").await;
    assert_eq!(slow.len() as u64, counted);
    // 5 % of 400 = 20; a binomial draw stays within 8..=36 with overwhelming probability.
    assert!((8..=36).contains(&slow.len()), "{} stragglers", slow.len());
    let (again, _) = stragglers_of_a_run("stragglers-a").await;
    assert_eq!(again, slow, "same seed, same stragglers");
    let (other, _) = stragglers_of_a_run("stragglers-b").await;
    assert_ne!(other, slow, "another seed draws others");
}

#[actix_rt::test]
async fn a_devshard_straggler_stalls_after_its_receipt_before_its_first_token() {
    tokio::time::pause();
    let net = start(config(1)).await;
    net.set_latency(0, straggly(1.0)).unwrap();
    let mut s = Session::new(&net, "42");
    let prompt = br#"{"stream":true,"messages":[{"role":"user","content":"slow one"}]}"#;
    let (diff, payload) = s.compose_inference(vec![], prompt, 16);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let t = Instant::now();
    let resp = s.post(0, "chat/completions", body).await.unwrap();
    let times = event_times(resp, t).await;
    let at = |want: fn(&HostEvent) -> bool| times.iter().find(|(_, e)| want(e)).unwrap().0;
    let receipt = at(|e| matches!(e, HostEvent::Receipt(_)));
    let first = at(|e| matches!(e, HostEvent::Chunk(_)));
    assert!(receipt < Duration::from_millis(5), "{receipt:?}");
    assert!(
        first >= Duration::from_millis(DELAY_MS) && first < Duration::from_millis(DELAY_MS + 5),
        "{first:?}"
    );
    assert_eq!(net.counters(0).unwrap().stragglers, 1);
}
