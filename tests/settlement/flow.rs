//! Settling through the actor: served requests, then draining, finalize rounds, signature
//! collection, the tx and its confirmation, with the chain's money checked independently.

use std::{cell::RefCell, rc::Rc, sync::Arc, time::Duration};

use actix::prelude::*;
use devshard_actors::{
    protocol::cosmos::TxSettings,
    settlement::{
        chain::ChainTxClient,
        machine::{RetryStep, SettlementRecord, SettlementState},
        metrics::SettlementMetrics,
        GetSettlement, SettlementActor, SettlementDeps, StartSettlement,
    },
    store::{MemoryStore, SharedStore},
};
use devshard_gateway::sim::{EscrowStatus, Faults, SimConfig, TxFaults};

use crate::{
    check,
    client::{config, start, Session, TestNet},
    port::{escrow_info, TestEscrow},
};

const PROMPT: &[u8] = br#"{"stream":true}"#;

pub struct Rig {
    pub net: TestNet,
    pub escrow: TestEscrow,
    pub store: SharedStore,
}

async fn serve(s: &mut Session, n: usize) {
    let mut pending = Vec::new();
    for _ in 0..n {
        let (nonce, out) = s.infer(std::mem::take(&mut pending), PROMPT).await;
        pending.push(Session::confirm_from(out.receipt().unwrap(), nonce));
        pending.extend(out.meta().cloned().unwrap_or_default());
    }
    s.compose(pending);
}

pub async fn rig(cfg: SimConfig, requests: usize) -> Rig {
    let net = start(cfg).await;
    let mut s = Session::new(&net, "42");
    serve(&mut s, requests).await;
    Rig {
        net,
        escrow: TestEscrow {
            session: Rc::new(RefCell::new(s)),
            charged: Rc::default(),
        },
        store: Arc::new(MemoryStore::new()),
    }
}

pub fn actor(rig: &Rig, store: SharedStore) -> Addr<SettlementActor> {
    let deps = SettlementDeps {
        store,
        clock: rig.net.clock.clone().shared(),
        log: slog::Logger::root(slog::Discard, slog::o!()),
        chain: ChainTxClient {
            rest_url: rig.net.chain_url().to_owned(),
            timeout: Duration::from_secs(10),
        },
        key: rig.net.gateway_key().clone(),
        tx: TxSettings::default(),
        metrics: Some(SettlementMetrics::register(&prometheus::Registry::new()).unwrap()),
        query_timeout: Duration::from_secs(5),
    };
    let info = escrow_info(&rig.net, "42");
    SettlementActor::new(info, Rc::new(rig.escrow.clone()), deps).start()
}

/// Polls the record every virtual second until `done` holds (at most `secs` seconds).
pub async fn wait_until(
    addr: &Addr<SettlementActor>,
    secs: u64,
    done: impl Fn(&SettlementRecord) -> bool,
) -> SettlementRecord {
    for _ in 0..secs {
        if let Some(r) = addr.send(GetSettlement).await.unwrap() {
            if done(&r) {
                return r;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("not reached: {:?}", addr.send(GetSettlement).await.unwrap());
}

fn settled(r: &SettlementRecord) -> bool {
    matches!(r.state, SettlementState::Settled { .. })
}

async fn settle(rig: &Rig) -> SettlementRecord {
    let addr = actor(rig, rig.store.clone());
    let first = addr
        .send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    assert!(first.is_some());
    // A second call joins the running settlement.
    let joined = addr
        .send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    assert_eq!(joined.unwrap().started_ms, first.unwrap().started_ms);
    wait_until(&addr, 600, settled).await
}

#[actix_rt::test]
async fn fifty_requests_then_settle_pays_each_host_its_cost_and_refunds_the_creator() {
    tokio::time::pause();
    let rig = rig(config(7), 50).await;
    let creator = rig.net.gateway_key().address().clone();
    let before = rig.net.balance(&creator);
    let record = settle(&rig).await;
    let payload = serde_json::to_value(record.payload.as_ref().unwrap()).unwrap();

    // Independent: the root from the payload, the tx signature, every quorum signature.
    assert_eq!(
        check::recompute_root(&payload),
        record.payload.as_ref().unwrap().state_root
    );
    let tx = record.signed_tx.as_ref().unwrap();
    let account = 7; // the simulator's first account number (the creator's)
    check::verify_tx(
        &tx.bytes,
        rig.net.chain_id(),
        account,
        rig.net.gateway_key().public_key(),
    );
    let session = rig.escrow.session.borrow();
    let slot_keys: Vec<_> = (0..7)
        .map(|slot| *rig.net.hosts()[session.slot_host[slot]].key.public_key())
        .collect();
    assert!(check::quorum_weight(&payload, &slot_keys) >= 5);

    // The chain's money: each host exactly its cost, the creator amount − fees − costs.
    let mut costs = 0;
    for h in payload["host_stats"].as_array().unwrap() {
        let slot = h["slot_id"].as_u64().unwrap() as usize;
        let cost = h["cost"].as_u64().unwrap();
        let host = &rig.net.hosts()[session.slot_host[slot]];
        assert_eq!(rig.net.balance(&host.address), cost, "slot {slot}");
        costs += cost;
    }
    assert!(costs > 0);
    let amount = rig.net.escrow("42").unwrap().amount;
    let fees = payload["fees"].as_u64().unwrap();
    assert_eq!(
        rig.net.balance(&creator),
        before - 1_000_000 + amount - fees - costs
    );
    assert!(matches!(
        rig.net.escrow_status("42"),
        Some(EscrowStatus::Settled { .. })
    ));
    assert_eq!(rig.net.settlement_tx_hashes("42"), vec![tx.hash.clone()]);
    assert_eq!(record.tx_hashes, vec![tx.hash.clone()]);
    assert_eq!(
        record.state,
        SettlementState::Settled {
            tx_hash: Some(tx.hash.clone()),
            already_settled: false
        }
    );
}

#[actix_rt::test]
async fn a_broadcast_that_times_out_but_commits_is_confirmed_not_resigned() {
    tokio::time::pause();
    let rig = rig(config(4), 3).await;
    rig.net.set_tx_faults(TxFaults {
        broadcast_delay_ms: 120_000,
        delay_times: 1,
        ..TxFaults::default()
    });
    let r = settle(&rig).await;
    assert_eq!(r.tx_hashes.len(), 1);
    assert_eq!(rig.net.settlement_tx_hashes("42"), r.tx_hashes);
}

#[actix_rt::test]
async fn a_refused_broadcast_is_signed_again_and_the_chain_sees_one_tx() {
    tokio::time::pause();
    let rig = rig(config(4), 3).await;
    rig.net.set_tx_faults(TxFaults {
        reject_code: 13,
        reject_times: 2,
        ..TxFaults::default()
    });
    let r = settle(&rig).await;
    assert_eq!(r.tx_hashes.len(), 3, "two refusals, two new txs");
    assert_eq!(rig.net.settlement_tx_hashes("42").len(), 1);
}

#[actix_rt::test]
async fn a_dropped_tx_is_resent_with_the_same_bytes() {
    tokio::time::pause();
    let rig = rig(config(4), 3).await;
    rig.net.set_tx_faults(TxFaults {
        drop_times: 1,
        ..TxFaults::default()
    });
    let r = settle(&rig).await;
    assert_eq!(r.tx_hashes.len(), 1);
    assert!(r.attempts >= 1 || r.last_error.is_some());
    assert_eq!(rig.net.settlement_tx_hashes("42"), r.tx_hashes);
}

#[actix_rt::test]
async fn an_unreachable_chain_is_retried_visibly_until_it_returns() {
    tokio::time::pause();
    let rig = rig(config(4), 3).await;
    rig.net.set_chain_reachable(false);
    let addr = actor(&rig, rig.store.clone());
    addr.send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    let waiting = wait_until(&addr, 120, |r| {
        matches!(
            r.state,
            SettlementState::Retrying {
                step: RetryStep::Broadcast,
                ..
            }
        ) && r.attempts >= 2
    })
    .await;
    assert!(waiting.last_error.is_some());
    rig.net.set_chain_reachable(true);
    let r = wait_until(&addr, 300, settled).await;
    assert_eq!(rig.net.settlement_tx_hashes("42"), r.tx_hashes);
}

#[actix_rt::test]
async fn an_escrow_already_settled_on_chain_ends_as_a_success() {
    tokio::time::pause();
    let rig = rig(config(4), 3).await;
    settle(&rig).await;
    // A fresh record (as if another gateway or an operator settled it).
    let fresh: SharedStore = Arc::new(MemoryStore::new());
    let addr = actor(&rig, fresh);
    addr.send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    let r = wait_until(&addr, 600, settled).await;
    assert_eq!(
        r.state,
        SettlementState::Settled {
            tx_hash: None,
            already_settled: true
        }
    );
}

#[actix_rt::test]
async fn with_three_of_seven_hosts_down_the_settlement_waits_visibly_until_one_returns() {
    tokio::time::pause();
    let rig = rig(config(7), 14).await;
    let down = Faults {
        refuse_connections: true,
        ..Faults::default()
    };
    for h in [1, 3, 5] {
        rig.net.set_faults(h, down.clone()).unwrap();
    }
    let addr = actor(&rig, rig.store.clone());
    addr.send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    let waiting = wait_until(&addr, 300, |r| {
        matches!(
            r.state,
            SettlementState::Retrying {
                step: RetryStep::Collecting,
                ..
            }
        ) && r.attempts >= 2
    })
    .await;
    let w = waiting.weight.unwrap();
    assert_eq!((w.weight, w.threshold), (4, 5));
    assert_eq!(
        waiting.last_error.as_deref(),
        Some("insufficient signatures: 4/5 weight")
    );
    rig.net.clear_faults(3).unwrap();
    let r = wait_until(&addr, 300, settled).await;
    assert_eq!(r.weight.unwrap().weight, 5);
    assert_eq!(rig.net.settlement_tx_hashes("42"), r.tx_hashes);
}

#[actix_rt::test]
async fn a_wrong_root_final_signature_is_not_counted_and_its_host_is_charged() {
    tokio::time::pause();
    let rig = rig(config(4), 3).await;
    let forger = rig.net.hosts()[1].address.clone();
    rig.net
        .set_faults(
            1,
            Faults {
                signatures_wrong_root: true,
                ..Faults::default()
            },
        )
        .unwrap();
    let r = settle(&rig).await;
    // The three honest hosts reach the threshold of 3 alone; the forger is charged once.
    assert_eq!(r.weight.map(|w| (w.weight, w.threshold)), Some((3, 3)));
    assert_eq!(*rig.escrow.charged.borrow(), vec![forger.clone()]);
    let payload = serde_json::to_value(r.payload.as_ref().unwrap()).unwrap();
    let session = rig.escrow.session.borrow();
    for s in payload["signatures"].as_array().unwrap() {
        let slot = s["slot_id"].as_u64().unwrap() as usize;
        assert_ne!(
            session.slot_host[slot], 1,
            "the forged signature was not counted"
        );
    }
    assert_eq!(rig.net.settlement_tx_hashes("42"), r.tx_hashes);
}
