//! Settling through the running gateway (admin API → settlement actor → escrow finalize rounds
//! → simulated hosts and chain, all over real HTTP): 50 requests, then settle; the chain shows
//! the escrow settled, every host paid exactly its cost, the creator refunded the rest.

use std::time::Duration;

use devshard_actors::protocol::{crypto::recover_address, state::state_sig_content};
use devshard_gateway::sim::{EscrowStatus, Faults, Profile, SimConfig, WarmMode};
use serde_json::Value;

use crate::live::{self, actors, admin_get, chat, ADMIN};

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
    assert_eq!(
        Some(nonce + left.unwrap()),
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
async fn settlement_entry(url: &str, id: &str) -> Value {
    let all = actors(url, "?kind=settlement").await;
    assert!(all.iter().all(|a| a["kind"] == "settlement"), "{all:?}");
    all.into_iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no settlement entry for {id}"))
}

/// The escrow's budget once the auto-settle tick has seen it (bounded wait).
async fn wait_budget(url: &str, id: &str) -> Value {
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
async fn wait_record(url: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
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

fn sim(seed: &str, hosts: usize) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = hosts;
    cfg.profile = Profile::Zero;
    cfg
}

#[actix_rt::test]
async fn a_quorum_short_settlement_is_visible_in_the_debug_listing_until_hosts_return() {
    let live = live::start_with(sim("settle-visible", 4), &[], |_| {}).await;
    let url = live.url().to_string();
    for _ in 0..6 {
        assert_eq!(chat(&url, CHAT).await.0, 200);
    }
    // Two of four hosts give no signature: weight 2 < threshold 3.
    let silent = Faults {
        withhold_state_sig: true,
        signatures_empty: true,
        ..Faults::default()
    };
    live.sim.set_faults(1, silent.clone()).unwrap();
    live.sim.set_faults(2, silent).unwrap();
    assert_eq!(admin_post(&url, "/v1/admin/escrows/42/settle").await.0, 202);
    wait_record(&url, "42", |r| {
        r["state"] == "retrying" && r["attempts"].as_u64() >= Some(1)
    })
    .await;
    let entry = settlement_entry(&url, "42").await;
    assert_eq!(entry["state"], "retrying", "{entry}");
    assert_eq!(entry["alive"], true);
    let d = &entry["detail"];
    assert_eq!(
        (d["weight"].as_u64(), d["threshold"].as_u64()),
        (Some(2), Some(3)),
        "{entry}"
    );
    assert!(d["attempts"].as_u64().unwrap() >= 1, "{entry}");
    assert_eq!(
        d["last_error"], "insufficient signatures: 2/3 weight",
        "{entry}"
    );
    live.sim.clear_all_faults();
    wait_record(&url, "42", |r| r["state"] == "settled").await;
    assert_eq!(settlement_entry(&url, "42").await["state"], "settled");
    live.stop().await;
}

#[actix_rt::test]
async fn a_wrong_root_final_signature_is_not_counted_and_its_host_is_charged() {
    let live = live::start_with(sim("settle-forged", 4), &[], |_| {}).await;
    let url = live.url().to_string();
    for _ in 0..6 {
        assert_eq!(chat(&url, CHAT).await.0, 200);
    }
    // Host 1 keeps its receipts' signatures to itself and answers the fetch with a signature
    // over a wrong root: the only signature of it the settlement sees is forged.
    let forger = live.sim.hosts()[1].address.clone();
    let forged = Faults {
        withhold_state_sig: true,
        signatures_wrong_root: true,
        ..Faults::default()
    };
    live.sim.set_faults(1, forged).unwrap();
    assert_eq!(admin_post(&url, "/v1/admin/escrows/42/settle").await.0, 202);
    let r = wait_record(&url, "42", |r| r["state"] == "settled").await;
    // Three honest hosts reach the threshold of 3; the forger's slots are not in the payload.
    assert_eq!(
        (r["weight"].as_u64(), r["threshold"].as_u64()),
        (Some(3), Some(3)),
        "{r}"
    );
    let escrow = live.sim.escrow("42").unwrap();
    for s in r["payload"]["signatures"].as_array().unwrap() {
        let slot = s["slot_id"].as_u64().unwrap() as usize;
        assert_ne!(
            escrow.slots[slot], forger,
            "a forged signature was counted: {r}"
        );
    }
    assert!(matches!(
        live.sim.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));
    // Charged like any invalid signature: byzantine, ejected at once.
    let participants = actors(&url, "?kind=participant").await;
    let p = participants
        .iter()
        .find(|p| p["id"] == forger.as_str())
        .unwrap_or_else(|| panic!("{participants:?}"));
    assert_eq!(p["state"], "ejected", "{p}");
    let ejected = participants
        .iter()
        .filter(|p| p["state"] == "ejected")
        .count();
    assert_eq!(ejected, 1, "only the forger is charged: {participants:?}");
    live.stop().await;
}

#[actix_rt::test]
async fn hosts_signing_the_final_state_with_granted_warm_keys_count_and_the_chain_agrees() {
    let mut cfg = sim("settle-warm", 4);
    cfg.warm_keys = WarmMode::All;
    let live = live::start_with(cfg, &[], |_| {}).await;
    let url = live.url().to_string();
    for _ in 0..6 {
        assert_eq!(chat(&url, CHAT).await.0, 200);
    }
    assert_eq!(admin_post(&url, "/v1/admin/escrows/42/settle").await.0, 202);
    let r = wait_record(&url, "42", |r| r["state"] == "settled").await;
    assert_eq!(
        (r["weight"].as_u64(), r["threshold"].as_u64()),
        (Some(4), Some(3)),
        "{r}"
    );
    // Every counted signature is by its host's warm key, not its cold key.
    let p = &r["payload"];
    let b64 = |v: &Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    let content = state_sig_content(&b64(&p["state_root"]), "42", p["nonce"].as_u64().unwrap());
    let escrow = live.sim.escrow("42").unwrap();
    for s in p["signatures"].as_array().unwrap() {
        let slot = s["slot_id"].as_u64().unwrap() as usize;
        let signer = recover_address(&content, &b64(&s["signature"])).unwrap();
        let host = live
            .sim
            .hosts()
            .iter()
            .find(|h| h.address == escrow.slots[slot])
            .unwrap();
        assert_eq!(
            Some(&signer),
            host.warm_key.as_ref().map(|k| k.address()),
            "slot {slot}"
        );
    }
    // The chain checked the warm keys' grants itself and paid.
    assert!(matches!(
        live.sim.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));
    live.stop().await;
}

#[actix_rt::test]
async fn a_retry_onto_an_escrow_that_just_closed_is_placed_on_the_other_escrow() {
    let mut cfg = sim("settle-replace", 4);
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    let live = live::start_with(cfg, &[("DEVSHARD_ESCROWS", "42,43")], |_| {}).await;
    let url = live.url().to_string();
    // No hedge: the failing primary is the only attempt until its retry.
    let mut resp = live::client(2)
        .put(format!("{url}/v1/admin/settings"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send_json(&serde_json::json!({"health": {"hedge_budget": 0.0, "hedge_burst": 0.0}}))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.body().await);
    for _ in 0..4 {
        assert_eq!(chat(&url, CHAT).await.0, 200);
    }
    // Every host stalls its next answer, then drops it after the receipt.
    let failing = Faults {
        stall_before_receipt_ms: Some(2_500),
        drop_after_receipt: true,
        times: Some(1),
        ..Faults::default()
    };
    let before: Vec<u64> = (0..4).map(|i| live.sim.counters(i).unwrap().chat).collect();
    for i in 0..4 {
        live.sim.set_faults(i, failing.clone()).unwrap();
    }
    let request = actix_rt::spawn({
        let url = url.clone();
        async move { chat(&url, CHAT).await }
    });
    // The primary reached its host (which consumed its fault set): the others are made healthy.
    let mut busy = None;
    for _ in 0..400 {
        busy = (0..4).find(|&i| live.sim.counters(i).unwrap().chat > before[i]);
        if busy.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(busy.is_some(), "the primary never reached a host");
    live.sim.clear_all_faults();
    // Close the escrow the request is on, while its primary stalls.
    let escrows = actors(&url, "?kind=escrow").await;
    let on = escrows
        .iter()
        .find(|e| e["in_flight"].as_u64() > Some(0))
        .unwrap_or_else(|| panic!("no escrow has the request in flight: {escrows:?}"));
    let on = on["id"].as_str().unwrap().to_string();
    let other = if on == "42" { "43" } else { "42" };
    let path = format!("/v1/admin/escrows/{on}/settle");
    assert_eq!(admin_post(&url, &path).await.0, 202);
    // The retry finds the escrow closed and the request moves to the other one: no failure.
    let (status, headers, body) = request.await.unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answered_by = headers.get("x-devshard-escrow").unwrap().to_str().unwrap();
    assert_eq!(answered_by, other);
    // The closed escrow keeps draining (its dropped nonce settles by timeout vote); it serves no
    // new request meanwhile.
    assert_ne!(settlement_entry(&url, &on).await["state"], "active");
    assert_eq!(chat(&url, CHAT).await.0, 200);
    live.stop().await;
}

#[actix_rt::test]
async fn a_request_for_a_model_whose_only_escrow_closed_gets_a_clear_503_with_retry_after() {
    let live = live::start_with(sim("settle-closed", 4), &[], |_| {}).await;
    let url = live.url().to_string();
    assert_eq!(chat(&url, CHAT).await.0, 200);
    assert_eq!(admin_post(&url, "/v1/admin/escrows/42/settle").await.0, 202);
    wait_record(&url, "42", |r| r["state"] == "settled").await;
    let (status, headers, body) = chat(&url, CHAT).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(headers.get("retry-after").is_some(), "{headers:?}");
    assert_eq!(body["error"]["type"], "service_unavailable", "{body}");
    live.stop().await;
}
