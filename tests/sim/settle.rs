//! The chain side of settlement (docs/lifecycle.md §6), black-box over the Cosmos REST API: a
//! session is served and finalized by the test client, every host signs the final root, and a
//! signed `MsgSettleDevshardEscrow` tx is broadcast. The chain must check the signature over the
//! SignDoc, the root, the settler and the quorum itself, pay every host and refund the creator,
//! and every tx fault knob must do what it says.

use std::{collections::BTreeMap, time::Duration};

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use devshard_actors::{
    protocol::{
        cosmos::{settle_tx, SignedTx, TxSettings},
        proto::{DevshardTx, MsgFinalizeRound, Tx},
        state::Phase,
        tx_timeout::TxTimeout,
    },
    settlement::payload::SettlementPayload,
};
use devshard_gateway::sim::{EscrowStatus, TxFaults};
use serde_json::{json, Value};

use crate::client::{config, http, start, Session, TestNet};

const PROMPT: &[u8] = br#"{"stream":true}"#;

pub(crate) async fn get(url: String) -> (u16, Value) {
    let mut resp = http().get(url).send().await.unwrap();
    let body = resp.body().await.unwrap();
    (
        resp.status().as_u16(),
        serde_json::from_slice(&body).unwrap(),
    )
}

/// `n` inferences, each carrying the previous one's ConfirmStart and Finish.
async fn serve(s: &mut Session, n: usize) {
    let mut pending = Vec::new();
    for _ in 0..n {
        let (nonce, out) = s.infer(std::mem::take(&mut pending), PROMPT).await;
        pending.push(Session::confirm_from(out.receipt().unwrap(), nonce));
        pending.extend(out.meta().cloned().unwrap_or_default());
    }
    s.compose(pending);
}

/// MsgFinalizeRound, then N more rounds: Settlement at `F + N`. Returns the final nonce.
fn finalize(s: &mut Session) -> u64 {
    s.compose(vec![DevshardTx::new(Tx::FinalizeRound(
        MsgFinalizeRound {},
    ))]);
    for _ in 0..s.slot_host.len() {
        s.compose(Vec::new());
    }
    assert_eq!(s.sm.phase(), Phase::Settlement);
    s.sm.latest_nonce()
}

/// Sends every diff to `hosts` and collects their signatures of the final nonce.
async fn sign_final(s: &Session, hosts: &[usize], nonce: u64) -> BTreeMap<u32, Vec<u8>> {
    let mut sigs = BTreeMap::new();
    for &h in hosts {
        let body = Session::body(s.diffs_after(0), nonce, None);
        let resp = s.post(h, "chat/completions", body).await.unwrap();
        assert_eq!(
            resp.status().as_u16(),
            200,
            "host {h} applies the final diffs"
        );
        let (status, v) = s.get(h, &format!("signatures?nonce={nonce}")).await;
        assert_eq!(status, 200);
        for (slot, sig) in v["signatures"].as_object().unwrap() {
            let sig = B64.decode(sig.as_str().unwrap()).unwrap();
            sigs.insert(slot.parse::<u32>().unwrap(), sig);
        }
    }
    sigs
}

pub(crate) async fn account_number(net: &TestNet) -> u64 {
    let addr = net.gateway_key().address();
    let (status, v) = get(format!(
        "{}/cosmos/auth/v1beta1/accounts/{addr}",
        net.chain_url()
    ))
    .await;
    assert_eq!(status, 200);
    v["account"]["account_number"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub(crate) fn sign(
    net: &TestNet,
    s: &Session,
    payload: &SettlementPayload,
    account: u64,
) -> SignedTx {
    let msg = payload.to_msg(net.gateway_key().address()).unwrap();
    let settings = TxSettings::default();
    settle_tx(
        net.gateway_key(),
        &msg,
        &settings,
        net.chain_id(),
        account,
        TxTimeout::after_s(s.now(), 540),
    )
}

pub(crate) async fn broadcast(net: &TestNet, tx: &SignedTx) -> Value {
    let body = json!({"tx_bytes": B64.encode(&tx.bytes), "mode": "BROADCAST_MODE_SYNC"});
    let mut resp = http()
        .post(format!("{}/cosmos/tx/v1beta1/txs", net.chain_url()))
        .send_json(&body)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    serde_json::from_slice(&resp.body().await.unwrap()).unwrap()
}

pub(crate) async fn tx_result(net: &TestNet, hash: &str) -> (u16, Value) {
    get(format!("{}/cosmos/tx/v1beta1/txs/{hash}", net.chain_url())).await
}

/// A served and finalized session of 4 hosts with every host's final signature.
pub(crate) async fn ready(
    cfg_hosts: usize,
    signers: &[usize],
) -> (TestNet, Session, SettlementPayload) {
    let net = start(config(cfg_hosts)).await;
    let mut s = Session::new(&net, "42");
    serve(&mut s, 6).await;
    let fin = finalize(&mut s);
    let sigs = sign_final(&s, signers, fin).await;
    let payload = SettlementPayload::from_state(&s.sm, &sigs).unwrap();
    (net, s, payload)
}

#[actix_rt::test]
async fn a_valid_settlement_pays_every_host_its_cost_and_refunds_the_creator() {
    let (net, s, payload) = ready(4, &[0, 1, 2, 3]).await;
    let creator = net.gateway_key().address().clone();
    let before = net.balance(&creator);
    let account = account_number(&net).await;
    let tx = sign(&net, &s, &payload, account);
    let (_, info) = get(format!(
        "{}/cosmos/base/tendermint/v1beta1/node_info",
        net.chain_url()
    ))
    .await;
    assert_eq!(info["default_node_info"]["network"], net.chain_id());

    let r = broadcast(&net, &tx).await;
    assert_eq!(r["tx_response"]["code"], 0, "{r}");
    assert_eq!(r["tx_response"]["txhash"], tx.hash);
    let (status, committed) = tx_result(&net, &tx.hash).await;
    assert_eq!(
        (status, &committed["tx_response"]["code"]),
        (200, &json!(0)),
        "{committed}"
    );

    let costs: u64 = payload.host_stats.iter().map(|h| h.cost).sum();
    assert!(costs > 0, "the inferences earned something");
    for (slot, h) in payload.host_stats.iter().enumerate() {
        let host = &net.hosts()[s.slot_host[slot]];
        assert_eq!(
            net.balance(&host.address),
            h.cost,
            "slot {slot} paid its cost"
        );
    }
    let refund = net.escrow("42").unwrap().amount - payload.fees - costs;
    assert_eq!(net.balance(&creator), before - 1_000_000 + refund);
    match net.escrow_status("42").unwrap() {
        EscrowStatus::Settled {
            tx_hash, refund: r, ..
        } => {
            assert_eq!((tx_hash, r), (tx.hash.clone(), refund))
        }
        other => panic!("not settled: {other:?}"),
    }
    let (_, escrow) = get(format!(
        "{}/productscience/inference/inference/devshard_escrow/42",
        net.chain_url()
    ))
    .await;
    assert_eq!(escrow["escrow"]["settled"], true);
    assert_eq!(escrow["escrow"]["max_nonce"], "20000");

    // The same bytes again are deduplicated; a second, different tx fails in its block.
    let again = broadcast(&net, &tx).await;
    assert_eq!(again["tx_response"]["code"], 19);
    let mut later = payload.clone();
    later.signatures.pop();
    let second = sign(&net, &s, &later, account);
    assert_eq!(broadcast(&net, &second).await["tx_response"]["code"], 0);
    let (_, failed) = tx_result(&net, &second.hash).await;
    assert_eq!(failed["tx_response"]["code"], 1102, "{failed}");
    assert_eq!(net.settlement_tx_hashes("42").len(), 2);
    assert_eq!(net.balance(&creator), before - 2_000_000 + refund);
}

#[actix_rt::test]
async fn a_signature_over_another_account_number_or_chain_is_refused_at_check_tx() {
    let (net, s, payload) = ready(4, &[0, 1, 2, 3]).await;
    let account = account_number(&net).await;
    let msg = payload.to_msg(net.gateway_key().address()).unwrap();
    let settings = TxSettings::default();
    let wrong_account = settle_tx(
        net.gateway_key(),
        &msg,
        &settings,
        net.chain_id(),
        account + 1,
        TxTimeout::after_s(s.now(), 540),
    );
    assert_eq!(
        broadcast(&net, &wrong_account).await["tx_response"]["code"],
        4
    );
    let wrong_chain = settle_tx(
        net.gateway_key(),
        &msg,
        &settings,
        "other-chain",
        account,
        TxTimeout::after_s(s.now(), 540),
    );
    assert_eq!(
        broadcast(&net, &wrong_chain).await["tx_response"]["code"],
        4
    );
    let expired = settle_tx(
        net.gateway_key(),
        &msg,
        &settings,
        net.chain_id(),
        account,
        TxTimeout::after_s(s.now() - 600, 540),
    );
    assert_eq!(broadcast(&net, &expired).await["tx_response"]["code"], 30);
    assert_eq!(net.escrow_status("42"), Some(EscrowStatus::Open));
}

#[actix_rt::test]
async fn a_short_quorum_a_wrong_root_or_a_forged_signature_fails_in_the_block() {
    // 4 hosts: threshold 3; two signers are short.
    let (net, s, payload) = ready(4, &[0, 1]).await;
    let account = account_number(&net).await;
    let short = sign(&net, &s, &payload, account);
    assert_eq!(broadcast(&net, &short).await["tx_response"]["code"], 0);
    let (_, r) = tx_result(&net, &short.hash).await;
    assert_eq!(r["tx_response"]["code"], 1107, "{r}");
    assert!(r["tx_response"]["raw_log"]
        .as_str()
        .unwrap()
        .contains("2/3"));

    let mut wrong_root = payload.clone();
    wrong_root.fees += 1;
    let t = sign(&net, &s, &wrong_root, account);
    broadcast(&net, &t).await;
    assert_eq!(
        tx_result(&net, &t.hash).await.1["tx_response"]["code"],
        1104
    );

    let mut forged = payload.clone();
    forged
        .signatures
        .push(devshard_actors::settlement::payload::SignatureEntry {
            slot_id: 2,
            signature: forged.signatures[0].signature.clone(),
        });
    let t = sign(&net, &s, &forged, account);
    broadcast(&net, &t).await;
    assert_eq!(
        tx_result(&net, &t.hash).await.1["tx_response"]["code"],
        1106
    );
    assert_eq!(net.escrow_status("42"), Some(EscrowStatus::Open));
}

#[actix_rt::test]
async fn tx_faults_reject_drop_and_delay_broadcasts() {
    tokio::time::pause();
    let (net, s, payload) = ready(4, &[0, 1, 2, 3]).await;
    let account = account_number(&net).await;
    let tx = sign(&net, &s, &payload, account);

    // code ≠ 0: nothing taken.
    net.set_tx_faults(TxFaults {
        reject_code: 20,
        reject_times: 1,
        ..TxFaults::default()
    });
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 20);
    assert_eq!(tx_result(&net, &tx.hash).await.0, 404);

    // Dropped: answered 0, never committed; the same bytes are accepted again.
    net.set_tx_faults(TxFaults {
        drop_times: 1,
        ..TxFaults::default()
    });
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 0);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(tx_result(&net, &tx.hash).await.0, 404);

    // Times out, but commits.
    net.set_tx_faults(TxFaults {
        broadcast_delay_ms: 120_000,
        delay_times: 1,
        ..TxFaults::default()
    });
    let slow = tokio::time::timeout(Duration::from_secs(30), broadcast(&net, &tx)).await;
    assert!(slow.is_err(), "the broadcast answer is held back");
    let (status, r) = tx_result(&net, &tx.hash).await;
    assert_eq!((status, &r["tx_response"]["code"]), (200, &json!(0)));
    assert!(matches!(
        net.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));
    assert_eq!(net.settlement_tx_hashes("42"), vec![tx.hash.clone()]);
}

#[actix_rt::test]
async fn an_unreachable_chain_refuses_connections_until_it_returns() {
    let net = start(config(2)).await;
    let url = format!(
        "{}/cosmos/base/tendermint/v1beta1/node_info",
        net.chain_url()
    );
    net.set_chain_reachable(false);
    assert!(http().get(url.clone()).send().await.is_err());
    net.set_chain_reachable(true);
    assert_eq!(get(url).await.0, 200);
}

#[actix_rt::test]
async fn hosts_enforce_the_max_nonce_the_chain_reports() {
    let mut cfg = config(2);
    cfg.max_nonce = 8;
    let net = start(cfg).await;
    let (_, escrow) = get(format!(
        "{}/productscience/inference/inference/devshard_escrow/42",
        net.chain_url()
    ))
    .await;
    assert_eq!(escrow["escrow"]["max_nonce"], "8");
    let mut s = Session::new(&net, "42");
    // N = 2: the last active nonce is 8 − 3 = 5.
    for _ in 0..6 {
        s.compose(Vec::new());
    }
    let body = Session::body(s.diffs_after(0), 6, None);
    let mut resp = s.post(0, "chat/completions", body).await.unwrap();
    assert_eq!(resp.status().as_u16(), 500);
    let text = String::from_utf8_lossy(&resp.body().await.unwrap()).to_string();
    assert!(
        text.contains("nonce exceeds chain max_nonce limit"),
        "{text}"
    );
    // Finalizing within the reserve is accepted.
    let mut s = Session::new(&net, "42");
    for _ in 0..4 {
        s.compose(Vec::new());
    }
    let fin = finalize(&mut s);
    assert_eq!(
        fin, 7,
        "MsgFinalizeRound at the last active nonce 5, Settlement at 5 + N"
    );
    let body = Session::body(s.diffs_after(0), fin, None);
    assert_eq!(
        s.post(1, "chat/completions", body)
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
}
