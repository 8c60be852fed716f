//! Settling through the running gateway (admin API → settlement actor → escrow finalize rounds
//! → simulated hosts and chain, all over real HTTP): 50 requests, then settle; the chain shows
//! the escrow settled, every host paid exactly its cost, the creator refunded the rest.

use std::time::Duration;

use devshard_gateway::sim::{EscrowStatus, Profile, SimConfig};
use serde_json::Value;

use crate::live::{self, actors, admin_get, chat, ADMIN};

pub(crate) const CHAT: &str =
    r#"{"max_tokens":8,"messages":[{"role":"user","content":"settle me"}]}"#;

pub(crate) async fn admin_post(url: &str, path: &str) -> (u16, Value) {
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
    // The debug listing shows the escrow's settlement state and its budget before any settle.
    let entry = settlement_entry(&url, "42").await;
    assert_eq!(entry["state"], "active", "{entry}");
    let budget = wait_budget(&url, "42").await;
    assert!(budget["nonces_left"].as_u64().unwrap() > 0, "{budget}");
    assert!(budget["balance"].as_u64().unwrap() > 0, "{budget}");
    // The last tick's view (taken every 250 ms): some of the 50 nonces, and a consistent budget.
    let (nonce, left) = (
        budget["nonce"].as_u64().unwrap(),
        budget["nonces_left"].as_u64(),
    );
    assert!(nonce >= 1, "{budget}");
    // Inferences not settled yet count as used: each may still take a nonce (nonce_room).
    let unsettled = budget["unsettled"].as_u64().unwrap();
    assert_eq!(
        Some(nonce + unsettled + left.unwrap()),
        budget["serving_limit"].as_u64(),
        "{budget}"
    );
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
    let entry = settlement_entry(&url, "42").await;
    assert_eq!(entry["state"], "settled", "{entry}");
    assert_eq!(entry["detail"]["weight"], record["weight"]);
    assert_eq!(entry["detail"]["threshold"], record["threshold"]);
    assert_eq!(entry["detail"]["tx_hashes"], record["tx_hashes"]);

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

/// The `settlement` entry of `GET /v1/debug/actors?kind=settlement` for `id`.
pub(crate) async fn settlement_entry(url: &str, id: &str) -> Value {
    let all = actors(url, "?kind=settlement").await;
    assert!(all.iter().all(|a| a["kind"] == "settlement"), "{all:?}");
    all.into_iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no settlement entry for {id}"))
}

/// The escrow's budget once the auto-settle tick has seen it (bounded wait).
pub(crate) async fn wait_budget(url: &str, id: &str) -> Value {
    for _ in 0..100 {
        let b = settlement_entry(url, id).await["detail"]["budget"].clone();
        if !b.is_null() {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("escrow {id} has no budget in the debug listing");
}

/// Polls the settlement record until `done` holds (bounded).
pub(crate) async fn wait_record(url: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut r = Value::Null;
    for _ in 0..600 {
        r = admin_get(url, &format!("/v1/admin/escrows/{id}/settlement"))
            .await
            .1;
        if done(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("settlement of {id} never got there: {r}");
}

pub(crate) fn sim(seed: &str, hosts: usize) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = hosts;
    cfg.profile = Profile::Zero;
    cfg
}
