//! Settling through the running gateway (admin API → settlement actor → escrow finalize rounds
//! → simulated hosts and chain, all over real HTTP): 50 requests, then settle; the chain shows
//! the escrow settled, every host paid exactly its cost, the creator refunded the rest.

use std::time::Duration;

use devshard_gateway::sim::EscrowStatus;
use serde_json::Value;

use crate::live::{self, admin_get, chat, ADMIN};

const CHAT: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"settle me"}]}"#;

async fn admin_post(url: &str, path: &str) -> (u16, Value) {
    let mut resp = live::client(4)
        .post(format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (
        status,
        resp.json().limit(16 << 20).await.unwrap_or(Value::Null),
    )
}

#[actix_rt::test]
async fn fifty_requests_then_settle_through_the_admin_api() {
    let live = live::start("settle-e2e", 7, &[], |_| {}).await;
    let url = live.url().to_string();
    for _ in 0..50 {
        let (status, _, body) = chat(&url, CHAT).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let (status, body) = admin_post(&url, "/v1/admin/escrows/999/settle").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("escrow_not_found"))
    );

    let (status, body) = admin_post(&url, "/v1/admin/escrows/42/settle").await;
    assert_eq!(status, 202, "{body}");
    let (status, again) = admin_post(&url, "/v1/admin/escrows/42/settle").await;
    assert_eq!(status, 202, "a second call joins: {again}");
    assert_eq!(again["started_ms"], body["started_ms"]);

    let mut record = Value::Null;
    for _ in 0..600 {
        let (_, r) = admin_get(&url, "/v1/admin/escrows/42/settlement").await;
        if r["state"] == "settled" {
            record = r;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(record["state"], "settled", "{record}");
    let payload = &record["payload"];
    let sim = &live.sim;
    let escrow = sim.escrow("42").unwrap();
    let mut costs = 0;
    for h in payload["host_stats"].as_array().unwrap() {
        let slot = h["slot_id"].as_u64().unwrap() as usize;
        let cost = h["cost"].as_u64().unwrap();
        assert_eq!(
            sim.balance(&escrow.slots[slot]),
            cost,
            "slot {slot} paid exactly its cost"
        );
        costs += cost;
    }
    assert!(costs > 0);
    let fees = payload["fees"].as_u64().unwrap();
    match sim.escrow_status("42").unwrap() {
        EscrowStatus::Settled {
            refund, tx_hash, ..
        } => {
            assert_eq!(refund, escrow.amount - fees - costs);
            assert_eq!(Some(tx_hash.as_str()), record["tx_hash"].as_str());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.settlement_tx_hashes("42").len(), 1);
    assert!(record["weight"].as_u64().unwrap() >= record["threshold"].as_u64().unwrap());

    // Settled: no new request reaches this escrow; settling again is a clear 409.
    let (status, _, _) = chat(&url, CHAT).await;
    assert_ne!(status, 200);
    let (status, body) = admin_post(&url, "/v1/admin/escrows/42/settle").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("escrow_settled"))
    );
    live.stop().await;
}

#[actix_rt::test]
async fn an_escrow_at_its_nonce_limit_settles_by_itself_and_requests_move_on() {
    let mut cfg = devshard_gateway::sim::SimConfig::with_seed("settle-auto");
    cfg.hosts = 4;
    cfg.profile = devshard_gateway::sim::Profile::Zero;
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    cfg.max_nonces.insert("42".into(), 40);
    let live = live::start_with(cfg, &[("DEVSHARD_ESCROWS", "42,43")], |_| {}).await;
    let url = live.url().to_string();
    for i in 0..80 {
        let (status, _, body) = chat(&url, CHAT).await;
        assert_eq!(
            status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let mut state = Value::Null;
    for _ in 0..600 {
        let (_, r) = admin_get(&url, "/v1/admin/escrows/42/settlement").await;
        state = r["state"].clone();
        if state == "settled" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "settled");
    assert!(matches!(
        live.sim.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));
    assert_eq!(live.sim.escrow_status("43"), Some(EscrowStatus::Open));
    let (_, r) = admin_get(&url, "/v1/admin/escrows/43/settlement").await;
    assert_eq!(r["state"], "active");
    live.stop().await;
}
