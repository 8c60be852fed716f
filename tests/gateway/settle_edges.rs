//! Settlement edges through the running gateway: an escrow created by another key is refused
//! with a clear 403, and a settlement started while streams run drains them first (every
//! stream completes with 200 and `[DONE]`, then the escrow settles), and an escrow settles while
//! most of its hosts are ejected.

use devshard_gateway::sim::{EscrowStatus, LatencyProfile, Profile, SimConfig};

use crate::live::{self, admin_get, chat};
use crate::settle::{admin_post, wait_record, CHAT};

#[actix_rt::test]
async fn settling_an_escrow_created_by_another_key_is_a_clear_403() {
    let live = live::start("settle-not-ours", 4, &[], |_| {}).await;
    let (status, _, body) = chat(live.url(), CHAT).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    // The operator rotates the gateway's key: escrow 42 stays registered in the data directory,
    // but its creator is the old key, so this gateway may not settle it.
    let rotated = "11".repeat(32);
    let live = live.restart(&[("DEVSHARD_PRIVATE_KEY", &rotated)]).await;
    let url = live.url().to_string();
    let (status, body) = admin_post(&url, "/v1/admin/escrows/42/settle").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("escrow_not_ours")),
        "{body}"
    );
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let creator = live.sim.gateway_key().address().to_string();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("42") && message.contains(&creator),
        "{message}"
    );
    // Nothing was started: no settlement record, no tx on the chain.
    let (status, body) = admin_post(&url, "/v1/admin/escrows/42/finalize").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("escrow_not_ours"))
    );
    assert_eq!(live.sim.escrow_status("42"), Some(EscrowStatus::Open));
    assert!(live.sim.settlement_tx_hashes("42").is_empty());
    live.stop().await;
}

const STREAM: &str =
    r#"{"stream":true,"max_tokens":16,"messages":[{"role":"user","content":"drain me"}]}"#;

#[actix_rt::test]
async fn settling_while_requests_stream_drains_them_first() {
    let mut cfg = SimConfig::with_seed("settle-drain");
    cfg.hosts = 4;
    // ~2 s per stream (16 tokens at 8 tokens/s): the settle call lands mid-stream.
    cfg.profile = Profile::Custom(vec![LatencyProfile {
        tokens_per_s: 8.0,
        jitter: 0.0,
        ..LatencyProfile::zero()
    }]);
    let live = live::start_with(cfg, &[], |_| {}).await;
    let url = live.url().to_string();
    let client = live::client(8);
    let mut streams = Vec::new();
    for _ in 0..4 {
        let resp = client
            .post(format!("{url}/v1/chat/completions"))
            .insert_header(("Content-Type", "application/json"))
            .send_body(STREAM)
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        streams.push(resp);
    }
    // Every stream has its 200 head and is still generating: settle now.
    let (status, body) = admin_post(&url, "/v1/admin/escrows/42/settle").await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "draining", "streams are running: {body}");
    for (i, mut resp) in streams.into_iter().enumerate() {
        let bytes = resp.body().limit(16 << 20).await.unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("data: [DONE]"), "stream {i}: {text}");
        assert!(!text.contains("\"error\""), "stream {i} failed: {text}");
        assert!(
            !crate::harness::stream_content(&bytes).is_empty(),
            "stream {i}: {text}"
        );
    }
    let record = wait_record(&url, "42", |r| r["state"] == "settled").await;
    assert!(
        matches!(
            live.sim.escrow_status("42"),
            Some(EscrowStatus::Settled { .. })
        ),
        "{record}"
    );
    assert_eq!(live.sim.settlement_tx_hashes("42").len(), 1);
    live.stop().await;
}

/// The rotating hour-long run ended with three of five hosts ejected for another 20–28 minutes
/// and two escrows stuck in `retrying` at "insufficient signatures: 2/4 weight": the
/// settlement's catch-up left ejected hosts out, so they never reached the final state to sign
/// it. Ejection keeps inference away from a host; its signature on the final state is still
/// owed, so the settlement catches ejected hosts up too.
#[actix_rt::test]
async fn rotating_long_run_an_escrow_settles_while_three_of_five_hosts_are_ejected() {
    let live = live::start("settle-ejected", 5, &[], |_| {}).await;
    let url = live.url().to_string();
    for _ in 0..10 {
        let (status, _, body) = chat(&url, CHAT).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let mut hosts = live.sim.escrow("42").unwrap().slots.clone();
    hosts.dedup();
    for a in &hosts[..3] {
        let body = serde_json::json!({ "participant_key": a.to_string() }).to_string();
        let (status, r) = live::admin_post(&url, "/v1/admin/participants/eject", &body).await;
        assert_eq!(status, 200, "{r}");
    }
    // The other two serve; the ejected three fall behind.
    for _ in 0..10 {
        let (status, _, body) = chat(&url, CHAT).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let (status, body) = admin_post(&url, "/v1/admin/escrows/42/settle").await;
    assert_eq!(status, 202, "{body}");
    let record = wait_record(&url, "42", |r| {
        r["state"] == "settled" || r["last_error"].as_str().is_some_and(|e| e.contains("2/4"))
    })
    .await;
    assert_eq!(record["state"], "settled", "{record}");
    let (_, parts) = admin_get(&url, "/v1/admin/participants").await;
    let ejected = parts["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["state"] == "ejected")
        .count();
    assert_eq!(
        ejected, 3,
        "settled while the three were still ejected: {parts}"
    );
    assert!(matches!(
        live.sim.escrow_status("42").unwrap(),
        EscrowStatus::Settled { .. }
    ));
    live.stop().await;
}
