//! The simulated chain's own settlement rules and its runtime knobs (docs/lifecycle.md §6): only
//! the escrow's creator, signing the tx itself, may settle; the control API sets every tx fault
//! knob and makes the chain unreachable for a while, and each does what it says.

use std::time::Duration;

use devshard_actors::protocol::{
    cosmos::{settle_tx, TxSettings},
    tx_timeout::TxTimeout,
};
use devshard_gateway::sim::EscrowStatus;
use serde_json::json;

use crate::{
    client::{config, control_call, http, start},
    settle::{account_number, broadcast, get, ready, sign, tx_result},
};

#[actix_rt::test]
async fn the_chain_settles_only_for_the_escrow_creator_who_signed_the_tx() {
    tokio::time::pause();
    let (net, s, payload) = ready(4, &[0, 1, 2, 3]).await;
    let creator = net.gateway_key().address().clone();
    let host = &net.hosts()[0];
    net.fund(&host.address, 10_000_000);
    let (_, acc) = get(format!(
        "{}/cosmos/auth/v1beta1/accounts/{}",
        net.chain_url(),
        host.address
    ))
    .await;
    let host_account: u64 = acc["account"]["account_number"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let by_host = |settler| {
        let msg = payload.to_msg(settler).unwrap();
        let t = TxSettings::default();
        settle_tx(
            &host.key,
            &msg,
            &t,
            net.chain_id(),
            host_account,
            TxTimeout::after_s(s.now(), 540),
        )
    };
    // A funded account that is not the creator settles in its own name: refused in the block.
    let t = by_host(&host.address);
    assert_eq!(broadcast(&net, &t).await["tx_response"]["code"], 0);
    let (_, r) = tx_result(&net, &t.hash).await;
    assert_eq!(r["tx_response"]["code"], 1103, "{r}");
    assert!(r["tx_response"]["raw_log"]
        .as_str()
        .unwrap()
        .contains("is not the creator"));
    // It names the creator as settler but signs itself: the settler did not sign.
    let t = by_host(&creator);
    assert_eq!(broadcast(&net, &t).await["tx_response"]["code"], 0);
    let (_, r) = tx_result(&net, &t.hash).await;
    assert_eq!(r["tx_response"]["code"], 4, "{r}");
    assert_eq!(net.escrow_status("42"), Some(EscrowStatus::Open));
    assert!(net.settlement_tx_hashes("42").len() == 2);
    // The creator's own tx settles.
    let account = account_number(&net).await;
    let t = sign(&net, &s, &payload, account);
    assert_eq!(broadcast(&net, &t).await["tx_response"]["code"], 0);
    assert_eq!(tx_result(&net, &t.hash).await.1["tx_response"]["code"], 0);
    assert!(matches!(
        net.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));
}

#[actix_rt::test]
async fn the_control_api_sets_each_tx_fault_knob_at_runtime() {
    tokio::time::pause();
    let (net, s, payload) = ready(4, &[0, 1, 2, 3]).await;
    let account = account_number(&net).await;
    let tx = sign(&net, &s, &payload, account);
    let path = "/sim/chain/tx-faults";
    assert_eq!(
        control_call(&net, "PUT", path, Some(json!({"no_such_knob": 1})))
            .await
            .0,
        400
    );

    // code ≠ 0: nothing taken.
    let (status, f) = control_call(
        &net,
        "PUT",
        path,
        Some(json!({"reject_code": 20, "reject_times": 1})),
    )
    .await;
    assert_eq!((status, &f["reject_code"]), (200, &json!(20)));
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 20);
    assert_eq!(tx_result(&net, &tx.hash).await.0, 404);
    assert_eq!(
        control_call(&net, "GET", path, None).await.1["reject_times"],
        0
    );

    // Dropped: answered 0, never committed.
    control_call(&net, "PUT", path, Some(json!({"drop_times": 1}))).await;
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 0);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(tx_result(&net, &tx.hash).await.0, 404);

    // The broadcast times out, but the tx commits.
    let slow = json!({"broadcast_delay_ms": 120_000, "delay_times": 1});
    control_call(&net, "PUT", path, Some(slow)).await;
    let answer = tokio::time::timeout(Duration::from_secs(30), broadcast(&net, &tx)).await;
    assert!(answer.is_err(), "the broadcast answer is held back");
    let (status, r) = tx_result(&net, &tx.hash).await;
    assert_eq!((status, &r["tx_response"]["code"]), (200, &json!(0)));
    assert!(matches!(
        net.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));

    let (status, cleared) = control_call(&net, "DELETE", path, None).await;
    assert_eq!((status, &cleared["delay_times"]), (200, &json!(0)));
}

#[actix_rt::test]
async fn the_control_api_makes_the_chain_unreachable_for_a_while() {
    tokio::time::pause();
    let net = start(config(2)).await;
    let url = format!(
        "{}/cosmos/base/tendermint/v1beta1/node_info",
        net.chain_url()
    );
    let body = json!({"for_ms": 5_000, "after_ms": 100});
    let (status, r) = control_call(&net, "POST", "/sim/chain/unreachable", Some(body)).await;
    assert_eq!((status, &r["for_ms"]), (200, &json!(5_000)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(http().get(url.clone()).send().await.is_err(), "refused");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(get(url).await.0, 200);
    let bad = json!({"for_ms": "long"});
    let (status, _) = control_call(&net, "POST", "/sim/chain/unreachable", Some(bad)).await;
    assert_eq!(status, 400);
}
