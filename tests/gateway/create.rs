//! `POST /v1/admin/escrows {"model", "amount"}` against the simulated chain (real gateway, real
//! Cosmos txs over loopback): the escrow is created, registered and serves; each tx fault ends
//! the way docs/lifecycle.md §4 says, and never with two escrows for one creation.

use std::time::Duration;

use devshard_gateway::sim::TxFaults;
use serde_json::Value;

use super::live::{self, admin_get, admin_post, chat};

fn body(model: &str, amount: u64) -> String {
    serde_json::json!({"model": model, "amount": amount}).to_string()
}

async fn intents(url: &str) -> Vec<Value> {
    let (status, v) = admin_get(url, "/v1/admin/rotation").await;
    assert_eq!(status, 200, "{v}");
    v["view"]["intents"].as_array().cloned().unwrap_or_default()
}

#[actix_rt::test]
async fn an_admin_creates_an_escrow_on_chain_and_it_serves() {
    let l = live::start("create-admin", 4, &[], |c| {
        c.chain.timeout = Duration::from_millis(500);
    })
    .await;
    let url = l.url().to_string();
    let model = l.sim.config().model.clone();
    let creator = l.sim.gateway_key().address().clone();
    let before = l.sim.balance(&creator);

    let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, 2_000_000_000)).await;
    assert_eq!(status, 201, "{v}");
    let id = v["escrow_id"].as_str().unwrap().to_owned();
    assert_eq!(id, "43");
    assert_eq!(v["amount"], 2_000_000_000u64);
    assert_eq!(v["model"], model);
    let hash = v["tx_hash"].as_str().unwrap();
    assert_eq!(l.sim.created_escrows().get(hash), Some(&id));
    assert_eq!(l.sim.balance(&creator), before - 1_000_000 - 2_000_000_000);
    assert!(intents(&url).await.is_empty(), "the intent is cleared");

    // The new escrow serves once the configured one is deactivated.
    let (s, _) = admin_post(&url, "/v1/admin/escrows/42/deactivate", "").await;
    assert_eq!(s, 200);
    let req = serde_json::json!({"messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8})
    .to_string();
    let (s, headers, _) = chat(&url, &req).await;
    assert_eq!(s, 200);
    assert_eq!(headers.get("x-devshard-escrow").unwrap(), id.as_str());

    // Refused by CheckTx: 502 with the chain's code, nothing left open, no escrow.
    l.sim.set_tx_faults(TxFaults {
        reject_code: 13,
        reject_times: 1,
        ..TxFaults::default()
    });
    let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, 1_000_000_000)).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["code"], "escrow_creation_failed");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("code 13"),
        "{v}"
    );
    assert!(intents(&url).await.is_empty());

    // Committed with a code ≠ 0 (the deposit cannot be funded): 502, cleared.
    let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, u64::MAX / 2)).await;
    assert_eq!(status, 502, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("insufficient funds"),
        "{v}"
    );

    // Dropped from the mempool: the same bytes are sent again and commit once.
    l.sim.set_tx_faults(TxFaults {
        drop_times: 1,
        ..TxFaults::default()
    });
    let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, 1_000_000_000)).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["escrow_id"], "44");

    // The broadcast times out but the tx commits: found by its hash, registered once.
    l.sim.set_tx_faults(TxFaults {
        broadcast_delay_ms: 1_500,
        delay_times: 1,
        ..TxFaults::default()
    });
    let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, 1_000_000_000)).await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["escrow_id"], "45");
    assert_eq!(l.sim.created_escrows().len(), 3, "one escrow per creation");

    // Registering an existing escrow by id still works as before.
    let (status, v) = admin_post(&url, "/v1/admin/escrows", r#"{"escrow_id": "45"}"#).await;
    assert_eq!(status, 200, "{v}");
    l.stop().await;
}

#[actix_rt::test]
async fn an_unreachable_chain_keeps_the_intent_until_the_chain_answers() {
    let l = live::start("create-unreachable", 4, &[], |c| {
        c.chain.timeout = Duration::from_millis(500);
        c.rotation.check_interval_ms = 200;
    })
    .await;
    let url = l.url().to_string();
    let model = l.sim.config().model.clone();
    // The chain cannot be read: nothing is signed, nothing persisted.
    l.sim.set_chain_reachable(false);
    let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, 1_000_000_000)).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["code"], "chain_unavailable");
    l.sim.set_chain_reachable(true);
    assert!(intents(&url).await.is_empty());

    // Accepted, then the chain goes away before the commit: the intent stays open (202).
    l.sim.set_tx_faults(TxFaults {
        commit_delay_ms: 1_000,
        ..TxFaults::default()
    });
    let gone = {
        let sim = &l.sim;
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            sim.set_chain_reachable(false);
        }
    };
    let waiting = r#"{"model": "M", "amount": 1000000000, "wait_ms": 1500}"#.replace("M", &model);
    let ((status, v), ()) = futures::join!(admin_post(&url, "/v1/admin/escrows", &waiting), gone);
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["object"], "escrow.create_intent");
    let hash = v["tx_hash"].as_str().unwrap().to_owned();
    let open = intents(&url).await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0]["tx_hash"], hash.as_str());
    // Back: the next reconcile registers it (the rotation tick, every check interval).
    l.sim.set_chain_reachable(true);
    for _ in 0..200 {
        if intents(&url).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = l.sim.created_escrows().get(&hash).cloned().unwrap();
    let (status, v) = admin_get(&url, &format!("/v1/admin/escrows/{id}")).await;
    assert_eq!(status, 200, "registered: {v}");
    assert_eq!(l.sim.created_escrows().len(), 1);
    l.stop().await;
}

/// Found by the rotation test under load: two creations of one model and amount signed in the
/// same second were one tx (whole-second timeouts), so the second was refused as a duplicate and
/// its intent registered the first's escrow as its own. Each creation is a tx of its own now.
#[actix_rt::test]
async fn creations_back_to_back_are_distinct_txs_and_distinct_escrows() {
    let l = live::start("create-back-to-back", 4, &[], |_| {}).await;
    let url = l.url().to_string();
    let model = l.sim.config().model.clone();
    let creator = l.sim.gateway_key().address().clone();
    let before = l.sim.balance(&creator);
    let mut ids = Vec::new();
    let mut hashes = Vec::new();
    for _ in 0..3 {
        let (status, v) = admin_post(&url, "/v1/admin/escrows", &body(&model, 1_000_000_000)).await;
        assert_eq!(status, 201, "{v}");
        ids.push(v["escrow_id"].as_str().unwrap().to_owned());
        hashes.push(v["tx_hash"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids, ["43", "44", "45"], "three creations, three escrows");
    hashes.dedup();
    assert_eq!(hashes.len(), 3, "three txs");
    assert_eq!(l.sim.created_escrows().len(), 3);
    assert_eq!(
        l.sim.balance(&creator),
        before - 3 * (1_000_000 + 1_000_000_000),
        "three deposits and three fees"
    );
    l.stop().await;
}
