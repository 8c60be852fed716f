//! Latency profiles as a client sees them, measured in virtual time.

use std::time::Duration;

use devshard_actors::protocol::sse::HostEvent;
use devshard_gateway::sim::{LatencyProfile, Profile};
use tokio::time::Instant;

use crate::client::{config, event_times, start, Session};

const PROMPT: &[u8] = br#"{"stream":true,"messages":[{"role":"user","content":"how far"}]}"#;

/// Receipt and first-chunk times of one inference on the executor of the next nonce.
async fn timed(s: &mut Session) -> (usize, Duration, Duration, Duration) {
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let host = s.executor(diff.nonce);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let t = Instant::now();
    let resp = s.post(host, "chat/completions", body).await.unwrap();
    let times = event_times(resp, t).await;
    let receipt = times
        .iter()
        .find(|(_, e)| matches!(e, HostEvent::Receipt(_)))
        .unwrap()
        .0;
    let chunks: Vec<Duration> = times
        .iter()
        .filter(|(_, e)| matches!(e, HostEvent::Chunk(_)))
        .map(|(d, _)| *d)
        .collect();
    (host, receipt, chunks[0], *chunks.last().unwrap())
}

#[actix_rt::test]
async fn mixed_profile_reproduces_the_testnet_topology() {
    tokio::time::pause();
    let mut cfg = config(7);
    cfg.profile = Profile::Mixed;
    let net = start(cfg).await;
    let mut s = Session::new(&net, "42");
    let mut receipts = [Duration::ZERO; 7];
    let mut first = [Duration::ZERO; 7];
    for _ in 0..7 {
        let (host, receipt, first_chunk, _) = timed(&mut s).await;
        receipts[host] = receipt;
        first[host] = first_chunk;
    }
    for h in 0..2 {
        assert!(
            receipts[h] <= Duration::from_millis(15),
            "host {h}: {:?}",
            receipts[h]
        );
        assert!(
            first[h] <= Duration::from_millis(200),
            "host {h}: {:?}",
            first[h]
        );
    }
    for h in 2..7 {
        let ms = receipts[h].as_millis();
        assert!((560..=1_650).contains(&ms), "host {h}: {ms} ms");
        assert!(
            first[h] >= Duration::from_millis(900),
            "host {h}: {:?}",
            first[h]
        );
    }
    assert!(
        receipts[6] > receipts[2],
        "remote receipts spread over 0.7–1.4 s"
    );
}

#[actix_rt::test]
async fn zero_profile_takes_no_virtual_time() {
    tokio::time::pause();
    let net = start(config(2)).await;
    let mut s = Session::new(&net, "42");
    let (_, receipt, _, last) = timed(&mut s).await;
    assert!(
        receipt < Duration::from_millis(5) && last < Duration::from_millis(5),
        "{last:?}"
    );
}

#[actix_rt::test]
async fn ttft_grows_with_input_and_tokens_follow_the_rate() {
    tokio::time::pause();
    let net = start(config(1)).await;
    let profile = LatencyProfile {
        rtt_ms: 0,
        receipt_ms: 0,
        ttft_ms: 100,
        ttft_us_per_input_byte: 1_000.0,
        tokens_per_s: 10.0,
        jitter: 0.0,
        ..LatencyProfile::zero()
    };
    net.set_latency(0, profile).unwrap();
    let mut s = Session::new(&net, "42");
    let (_, receipt, first, last) = timed(&mut s).await;
    let expected_ttft = Duration::from_millis(100 + PROMPT.len() as u64);
    assert!(
        (first - receipt).abs_diff(expected_ttft) < Duration::from_millis(5),
        "{:?}",
        first - receipt
    );
    // 5 tokens at 10/s: four gaps of 100 ms after the first token.
    assert!(
        (last - first).abs_diff(Duration::from_millis(400)) < Duration::from_millis(5),
        "{:?}",
        last - first
    );
}
