//! `MsgCreateDevshardEscrow` on the simulated chain (docs/lifecycle.md §4, §6), black-box over
//! the Cosmos REST API: the chain checks the signature and account like any tx, takes the
//! deposit from the creator's balance, refuses what it cannot fund or may not create, dedupes
//! by hash, names the new escrow in `devshard_escrow_created`, and the escrow then serves with
//! its group and `max_nonce`.

use devshard_actors::protocol::{
    cosmos::{create_tx, MsgCreateDevshardEscrow, SignedTx, TxSettings},
    crypto::SigningKey,
    tx_timeout::TxTimeout,
};
use devshard_gateway::sim::{EscrowStatus, TxFaults};
use serde_json::Value;

use crate::{
    client::{config, start, Session, TestNet},
    settle::{account_number, broadcast, get, tx_result},
};

const PROMPT: &[u8] = br#"{"stream":true}"#;

fn create(net: &TestNet, key: &SigningKey, account: u64, amount: u64, model: &str) -> SignedTx {
    let msg = MsgCreateDevshardEscrow {
        creator: key.address().to_string(),
        amount,
        model_id: model.to_owned(),
    };
    let now = devshard_actors::clock::Clock::now_unix(&net.clock);
    create_tx(
        key,
        &msg,
        &TxSettings::default(),
        net.chain_id(),
        account,
        TxTimeout::after_s(now, 540),
    )
}

fn created_id(committed: &Value) -> String {
    let events = committed["tx_response"]["events"].as_array().unwrap();
    let e = events
        .iter()
        .find(|e| e["type"] == "devshard_escrow_created")
        .unwrap();
    let a = e["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "escrow_id")
        .unwrap();
    a["value"].as_str().unwrap().to_owned()
}

#[actix_rt::test]
async fn a_creation_takes_the_deposit_and_the_new_escrow_serves() {
    let net = start(config(4)).await;
    let key = net.gateway_key().clone();
    let creator = key.address().clone();
    let model = net.config().model.clone();
    let account = account_number(&net).await;
    let before = net.balance(&creator);
    let tx = create(&net, &key, account, 5_000_000, &model);
    let r = broadcast(&net, &tx).await;
    assert_eq!(r["tx_response"]["code"], 0, "{r}");
    let (status, committed) = tx_result(&net, &tx.hash).await;
    assert_eq!(
        (status, &committed["tx_response"]["code"]),
        (200, &0.into())
    );
    let id = created_id(&committed);
    assert_eq!(id, "43", "the next id after the configured 42");
    assert_eq!(net.balance(&creator), before - 1_000_000 - 5_000_000);
    assert_eq!(net.created_escrows().get(&tx.hash), Some(&id));
    assert_eq!(net.escrow_status(&id), Some(EscrowStatus::Open));

    // The REST query shows it with the group of the model's hosts and max_nonce.
    let (_, e) = get(format!(
        "{}/productscience/inference/inference/devshard_escrow/{id}",
        net.chain_url()
    ))
    .await;
    assert_eq!(e["found"], true, "{e}");
    assert_eq!(e["escrow"]["amount"], "5000000");
    assert_eq!(e["escrow"]["creator"], creator.as_str());
    assert_eq!(e["escrow"]["max_nonce"], "20000");
    assert_eq!(e["escrow"]["slots"].as_array().unwrap().len(), 4);

    // It serves: every host opens a session for it.
    let mut s = Session::new(&net, &id);
    let (nonce, out) = s.infer(Vec::new(), PROMPT).await;
    assert_eq!(nonce, 1);
    assert!(out.receipt().is_some(), "the host answered the new escrow");

    // The same bytes again are one tx: refused as a duplicate, no second escrow.
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 19);
    assert_eq!(net.created_escrows().len(), 1);
    assert_eq!(net.balance(&creator), before - 6_000_000);
}

#[actix_rt::test]
async fn a_creation_the_chain_cannot_fund_or_allow_fails_with_a_code() {
    let net = start(config(4)).await;
    let key = net.gateway_key().clone();
    let model = net.config().model.clone();
    let account = account_number(&net).await;
    let balance = net.balance(key.address());

    // More than the balance after the fee: committed with code 5, only the fee is taken.
    let tx = create(&net, &key, account, balance, &model);
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 0);
    let (_, c) = tx_result(&net, &tx.hash).await;
    assert_eq!(c["tx_response"]["code"], 5, "{c}");
    assert!(c["tx_response"]["raw_log"]
        .as_str()
        .unwrap()
        .contains("insufficient funds"));
    assert_eq!(net.balance(key.address()), balance - 1_000_000);

    // A model no group serves.
    let tx = create(&net, &key, account, 10, "no/such-model");
    broadcast(&net, &tx).await;
    assert_eq!(
        tx_result(&net, &tx.hash).await.1["tx_response"]["code"],
        1109
    );

    // A funded account that is not on the creator allow-list.
    let other = SigningKey::derive("outsider", 1);
    net.fund(other.address(), 50_000_000);
    let (_, v) = get(format!(
        "{}/cosmos/auth/v1beta1/accounts/{}",
        net.chain_url(),
        other.address()
    ))
    .await;
    let n: u64 = v["account"]["account_number"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let tx = create(&net, &other, n, 10_000, &model);
    broadcast(&net, &tx).await;
    assert_eq!(
        tx_result(&net, &tx.hash).await.1["tx_response"]["code"],
        1108
    );

    // A signature over another account number is refused by CheckTx.
    let tx = create(&net, &key, account + 1, 10_000, &model);
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 4);
    assert!(net.created_escrows().is_empty());
}

#[actix_rt::test]
async fn creation_txs_obey_the_tx_fault_knobs() {
    let net = start(config(4)).await;
    let key = net.gateway_key().clone();
    let model = net.config().model.clone();
    let account = account_number(&net).await;
    // Refused at CheckTx with a code ≠ 0: nothing created.
    net.set_tx_faults(TxFaults {
        reject_code: 13,
        reject_times: 1,
        ..TxFaults::default()
    });
    let tx = create(&net, &key, account, 50_000, &model);
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 13);
    assert_eq!(tx_result(&net, &tx.hash).await.0, 404);
    // Dropped from the mempool: accepted, never committed; the same bytes later commit once.
    net.set_tx_faults(TxFaults {
        drop_times: 1,
        ..TxFaults::default()
    });
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 0);
    assert_eq!(tx_result(&net, &tx.hash).await.0, 404);
    assert!(net.created_escrows().is_empty());
    assert_eq!(broadcast(&net, &tx).await["tx_response"]["code"], 0);
    let (status, c) = tx_result(&net, &tx.hash).await;
    assert_eq!((status, &c["tx_response"]["code"]), (200, &0.into()), "{c}");
    assert_eq!(net.created_escrows().len(), 1);
}
