//! Settlement faults through the running gateway: a quorum-short settlement visible in the debug
//! listing, a forged final signature not counted and its host charged, warm-key final signatures
//! counted by the gateway and the chain, and a request whose escrow closes under it placed on
//! another escrow (or answered a clear 503).

use std::time::Duration;

use devshard_actors::protocol::{crypto::recover_address, state::state_sig_content};
use devshard_gateway::sim::{EscrowStatus, Faults, WarmMode};
use serde_json::Value;

use crate::{
    live::{self, actors, chat, ADMIN},
    settle::{admin_post, settlement_entry, sim, wait_record, CHAT},
};

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
