//! `kill -9` of the real gateway binary around an escrow creation (docs/lifecycle.md §4): right
//! after the create tx is broadcast and before its result is recorded, while the tx waits in the
//! mempool, and after the creation is recorded. After each restart on the same data directory, the chain holds exactly one escrow
//! for the creation, and the gateway has it registered with no intent left open.

use std::time::Duration;

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{Profile, SimConfig, SimNetwork, TxFaults};
use serde_json::Value;

use super::child::{free_port, temp_dir, Gateway, ADMIN_KEY};

/// `POST /v1/admin/escrows` with a creation body → (status, JSON).
async fn create(url: &str, model: &str, amount: u64) -> (u16, Value) {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let body = serde_json::json!({"model": model, "amount": amount});
    match client
        .post(format!("{url}/v1/admin/escrows"))
        .insert_header(("Authorization", format!("Bearer {ADMIN_KEY}")))
        .send_json(&body)
        .await
    {
        Ok(mut r) => (r.status().as_u16(), r.json().await.unwrap_or(Value::Null)),
        Err(_) => (0, Value::Null),
    }
}

/// Waits until the creation of `hash` is registered and no intent is open (bounded).
async fn registered(gw: &Gateway, id: &str) -> Value {
    for _ in 0..400 {
        let v = gw.admin("GET", "/v1/admin/rotation").await;
        let open = v["view"]["intents"].as_array().map_or(0, Vec::len);
        let listed = gw.admin("GET", "/v1/admin/escrows").await;
        let has = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["escrow_id"] == id);
        if open == 0 && has {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "escrow {id} never registered: {}",
        gw.admin("GET", "/v1/admin/rotation").await
    );
}

#[actix_rt::test]
async fn sigkill_around_an_escrow_creation_funds_exactly_one_escrow() {
    let mut cfg = SimConfig::with_seed("create-crash");
    cfg.hosts = 4;
    cfg.profile = Profile::Zero;
    let model = cfg.model.clone();
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let dir = temp_dir("create-crash");
    let port = free_port();
    let mut gw = Gateway::start(&sim, &dir, port, &["42"]).await;

    // Killed after the broadcast, before the result is recorded: the chain takes the tx at
    // once but holds its answer back; the gateway is still waiting for it.
    sim.set_tx_faults(TxFaults {
        broadcast_delay_ms: 30_000,
        delay_times: 1,
        ..TxFaults::default()
    });
    let url = gw.url.clone();
    let m = model.clone();
    let pending = actix_rt::spawn(async move { create(&url, &m, 1_000_000_000).await });
    for _ in 0..400 {
        if !sim.created_escrows().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let created = sim.created_escrows();
    assert_eq!(created.len(), 1, "the tx reached the chain");
    gw.kill9();
    pending.abort();
    sim.set_tx_faults(TxFaults::default());
    gw = Gateway::start(&sim, &dir, port, &["42"]).await;
    let (hash, first) = created.into_iter().next().unwrap();
    registered(&gw, &first).await;
    assert_eq!(
        sim.created_escrows().len(),
        1,
        "no second escrow after the restart"
    );
    let e = gw.admin("GET", &format!("/v1/admin/escrows/{first}")).await;
    assert_eq!(e["amount"], 1_000_000_000u64, "{e}");
    assert_eq!(e["model"], model.as_str());

    // Killed while the tx waits in the mempool (the intent is durable, the chain has not
    // committed): the restart re-sends the same bytes (a duplicate), and registers it once.
    sim.set_tx_faults(TxFaults {
        commit_delay_ms: 1_500,
        ..TxFaults::default()
    });
    let url = gw.url.clone();
    let m = model.clone();
    let waiting = actix_rt::spawn(async move { create(&url, &m, 3_000_000_000).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sim.created_escrows().len(), 1, "not committed yet");
    gw.kill9();
    waiting.abort();
    gw = Gateway::start(&sim, &dir, port, &["42"]).await;
    let mut third = None;
    for _ in 0..400 {
        third = sim
            .created_escrows()
            .into_iter()
            .find(|(h, _)| *h != hash)
            .map(|(_, id)| id);
        if third.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let third = third.expect("the mempool tx committed");
    registered(&gw, &third).await;
    sim.set_tx_faults(TxFaults::default());

    // Killed after the creation is recorded: nothing is created again.
    let (status, v) = create(&gw.url, &model, 2_000_000_000).await;
    assert_eq!(status, 201, "{v}");
    let second = v["escrow_id"].as_str().unwrap().to_owned();
    gw.kill9();
    gw = Gateway::start(&sim, &dir, port, &["42"]).await;
    registered(&gw, &second).await;
    registered(&gw, &first).await;
    registered(&gw, &third).await;
    let all = sim.created_escrows();
    assert_eq!(all.len(), 3, "one escrow per creation: {all:?}");
    assert_eq!(all.get(&hash), Some(&first));
    assert_eq!(sim.escrow(&second).unwrap().amount, 2_000_000_000);
    // Both serve after the restarts: the chain and the gateway agree on them.
    for id in [&first, &second, &third] {
        let e = gw.admin("GET", &format!("/v1/admin/escrows/{id}")).await;
        assert_eq!(e["actor"]["alive"], true, "{e}");
    }
    gw.kill9();
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}
