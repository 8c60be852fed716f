//! The escrow session (gateway side) against independent host state machines: composed diffs are
//! accepted by strict hosts, receipts become verified confirms, finish markers are recognised,
//! lies are rejected, and a restored session continues at the same root.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use devshard_actors::{
    escrow::{
        session::{SessionError, StartParams},
        EscrowInfo, HostEndpoint, Session,
    },
    protocol::{
        crypto::{Address, SigningKey},
        diff::Diff,
        proto::{DevshardTx, MsgFinishInference, Tx},
        state::{self, SessionConfig, Slot, StateMachine},
        wire::ReceiptBody,
    },
};

const ESCROW: &str = "42";

/// `diffsForHost` from the window (every diff of these sessions is in it).
fn catch_up(s: &Session, host: &Address, limit: usize) -> Vec<Arc<Diff>> {
    s.held_after(s.catch_up_after(host), u64::MAX, limit)
        .unwrap()
}

struct World {
    gateway: SigningKey,
    hosts: Vec<SigningKey>,
    info: Arc<EscrowInfo>,
}

fn world(n: u32) -> World {
    let gateway = SigningKey::derive("session-test", 1000);
    let hosts: Vec<SigningKey> = (0..n)
        .map(|i| SigningKey::derive("session-test", i))
        .collect();
    let group: Vec<Slot> = hosts
        .iter()
        .enumerate()
        .map(|(i, k)| Slot {
            slot_id: i as u32,
            validator: k.address().clone(),
        })
        .collect();
    let info = EscrowInfo {
        escrow_id: ESCROW.into(),
        creator: gateway.address().clone(),
        model: "m".into(),
        amount: 10_000_000,
        config: SessionConfig::default_for_group(n as usize),
        group: group.clone(),
        hosts: hosts
            .iter()
            .enumerate()
            .map(|(i, k)| HostEndpoint {
                address: k.address().clone(),
                base_url: format!("http://h{i}"),
                slots: vec![i as u32],
                weight: 1,
            })
            .collect(),
        max_nonce: 20_000,
        route_prefix: "/v1/devshard".into(),
    };
    World {
        gateway,
        hosts,
        info: Arc::new(info),
    }
}

fn host_sm(w: &World) -> StateMachine {
    StateMachine::new(
        ESCROW,
        w.info.config.clone(),
        w.info.group.clone(),
        w.info.amount,
    )
    .unwrap()
}

fn params(ts: i64) -> StartParams {
    StartParams {
        prompt_hash: [9; 32],
        model: "m".into(),
        input_length: 100,
        max_tokens: 50,
        started_at: ts,
    }
}

#[test]
fn a_full_inference_cycle_keeps_gateway_and_host_in_lockstep() {
    let w = world(3);
    let mut s = Session::new(w.info.clone()).unwrap();
    let mut host = host_sm(&w);
    let d1 = s.compose_start(&params(1_700_000_000), &w.gateway).unwrap();
    host.apply_diff(&d1, w.gateway.address()).unwrap();
    let executor = &w.hosts[1]; // nonce 1 → slot 1
    let start = s.start_of(1).unwrap();
    let receipt = state::sign_receipt(&start, ESCROW, 1_700_000_001, executor);
    let root = host.state_root();
    let body = ReceiptBody {
        state_sig: Some(state::sign_state(&root, ESCROW, 1, executor).to_vec()),
        state_hash: Some(root.to_vec()),
        nonce: 1,
        receipt: Some(receipt.to_vec()),
        confirmed_at: Some(1_700_000_001),
    };
    s.process_receipt(executor.address(), Some(1), &body)
        .unwrap();
    assert_eq!(s.host_sync(executor.address()), 1);
    assert_eq!(s.signatures()[executor.address()].nonce, 1);
    let finish = state::sign_finish(
        MsgFinishInference {
            inference_id: 1,
            response_hash: vec![1; 32],
            input_tokens: 10,
            output_tokens: 5,
            executor_slot: 1,
            proposer_sig: vec![],
            escrow_id: ESCROW.into(),
        },
        executor,
    );
    let newly = s.process_mempool(vec![DevshardTx::new(Tx::FinishInference(finish.clone()))]);
    assert_eq!(newly, vec![1]);
    assert!(s.is_finished(1));
    // A second sighting of the same finish is deduplicated.
    assert!(s
        .process_mempool(vec![DevshardTx::new(Tx::FinishInference(finish))])
        .is_empty());
    let d2 = s.compose(vec![], &w.gateway).unwrap();
    assert_eq!(
        d2.txs.len(),
        2,
        "confirm and finish are sequenced in the next diff"
    );
    host.apply_diff(&d2, w.gateway.address()).unwrap();
    assert_eq!(host.state_root(), s.state().state_root());
    assert_eq!(
        catch_up(&s, executor.address(), 10)
            .iter()
            .map(|d| d.nonce)
            .collect::<Vec<_>>(),
        vec![2]
    );
}

#[test]
fn lying_hosts_are_rejected_with_typed_errors() {
    let w = world(3);
    let mut s = Session::new(w.info.clone()).unwrap();
    s.compose_start(&params(1_700_000_000), &w.gateway).unwrap();
    let executor = &w.hosts[1];
    let root = s.state().state_root();
    let wrong = ReceiptBody {
        state_hash: Some(vec![0; 32]),
        nonce: 1,
        ..Default::default()
    };
    assert!(matches!(
        s.process_receipt(executor.address(), Some(1), &wrong),
        Err(SessionError::StateHashMismatch { .. })
    ));
    let forged_sig = ReceiptBody {
        state_hash: Some(root.to_vec()),
        state_sig: Some(state::sign_state(&root, ESCROW, 1, &w.hosts[2]).to_vec()),
        nonce: 1,
        ..Default::default()
    };
    assert!(matches!(
        s.process_receipt(executor.address(), Some(1), &forged_sig),
        Err(SessionError::InvalidStateSig(_))
    ));
    let start = s.start_of(1).unwrap();
    let bad_receipt = ReceiptBody {
        nonce: 1,
        receipt: Some(state::sign_receipt(&start, ESCROW, 5, &w.hosts[0]).to_vec()),
        confirmed_at: Some(5),
        ..Default::default()
    };
    assert!(matches!(
        s.process_receipt(executor.address(), Some(1), &bad_receipt),
        Err(SessionError::InvalidReceipt { .. })
    ));
    let ahead = ReceiptBody {
        nonce: 9,
        ..Default::default()
    };
    assert!(matches!(
        s.process_receipt(executor.address(), None, &ahead),
        Err(SessionError::HostAhead { .. })
    ));
    // A finish signed by a non-executor is not taken as finished.
    let fake = state::sign_finish(
        MsgFinishInference {
            inference_id: 1,
            executor_slot: 1,
            escrow_id: ESCROW.into(),
            ..Default::default()
        },
        &w.hosts[2],
    );
    assert!(s
        .process_mempool(vec![DevshardTx::new(Tx::FinishInference(fake))])
        .is_empty());
    assert!(!s.is_finished(1));
}

#[test]
fn restore_replays_the_log_to_the_same_root_and_finds_unsettled_nonces() {
    let w = world(2);
    let mut s = Session::new(w.info.clone()).unwrap();
    let mut log = Vec::new();
    for i in 0..5 {
        let d = if i % 2 == 0 {
            s.compose_start(&params(1_700_000_000 + i), &w.gateway)
        } else {
            s.compose(vec![], &w.gateway)
        };
        log.push((*d.unwrap()).clone());
    }
    let restored = Session::restore(w.info.clone(), log.clone(), &Default::default()).unwrap();
    assert_eq!(restored.nonce(), 5);
    assert_eq!(restored.state().state_root(), s.state().state_root());
    let open: Vec<u64> = restored
        .unsettled_entries(0)
        .iter()
        .map(|e| e.nonce)
        .collect();
    assert_eq!(open, vec![1, 3, 5]);
    // Tampering with the log is detected.
    let mut bad = log;
    bad[2].post_state_root = vec![7; 32];
    assert!(matches!(
        Session::restore(w.info.clone(), bad, &Default::default()),
        Err(SessionError::Corrupt { nonce: 3, .. })
    ));
}

#[test]
fn host_sync_drives_catch_up_and_can_be_reset() {
    let w = world(2);
    let mut s = Session::new(w.info.clone()).unwrap();
    for _ in 0..4 {
        s.compose(vec![], &w.gateway).unwrap();
    }
    let h = w.hosts[0].address();
    assert_eq!(catch_up(&s, h, 100).len(), 4);
    s.set_host_sync(h.clone(), 3);
    assert_eq!(
        catch_up(&s, h, 100)
            .iter()
            .map(|d| d.nonce)
            .collect::<Vec<_>>(),
        vec![4]
    );
    s.set_host_sync(h.clone(), 99);
    assert_eq!(s.host_sync(h), 4, "never beyond our own nonce");
    s.reset_host_sync(h);
    assert_eq!(
        catch_up(&s, h, 2)
            .iter()
            .map(|d| d.nonce)
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
}
