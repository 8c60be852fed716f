//! Warm keys at the escrow session's verification sites (LIFECYCLE.md §5), against an
//! independent host state machine: unknown grants are unresolved (never a host fault), granted
//! keys are accepted and bound at composition, the delta replays without the chain, a bound key
//! needs no grant any more, and an ungranted key is an invalid receipt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use devshard_actors::{
    clock::SystemClock,
    escrow::{
        session::{SessionError, StartParams},
        EscrowInfo, HostEndpoint, Session,
    },
    protocol::{
        crypto::SigningKey,
        proto::{DevshardTx, MsgFinishInference, Tx},
        state::{self, SessionConfig, Slot, StateMachine},
        warm::{Acceptance, GrantAnswer, GrantCache, WarmKeyResolver},
        wire::ReceiptBody,
    },
    store::WarmDeltas,
};

const ESCROW: &str = "42";
const T: i64 = 1_700_000_000;

struct World {
    gateway: SigningKey,
    cold: Vec<SigningKey>,
    warm: Vec<SigningKey>,
    info: Arc<EscrowInfo>,
}

fn world(n: u32) -> World {
    let gateway = SigningKey::derive("warm-session", 1000);
    let cold: Vec<SigningKey> = (0..n).map(|i| SigningKey::derive("warm-cold", i)).collect();
    let warm: Vec<SigningKey> = (0..n).map(|i| SigningKey::derive("warm-hot", i)).collect();
    let group: Vec<Slot> = cold
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
        group,
        hosts: cold
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
        cold,
        warm,
        info: Arc::new(info),
    }
}

/// The chain as a host sees it: every warm key `i` granted by validator `i`.
#[derive(Debug)]
struct Chain(Vec<(SigningKey, SigningKey)>);

impl WarmKeyResolver for Chain {
    fn resolve(
        &self,
        v: &devshard_actors::protocol::crypto::Address,
        w: &devshard_actors::protocol::crypto::Address,
    ) -> GrantAnswer {
        if self
            .0
            .iter()
            .any(|(c, k)| c.address() == v && k.address() == w)
        {
            GrantAnswer::Granted
        } else {
            GrantAnswer::NotGranted
        }
    }
}

fn host_sm(w: &World) -> StateMachine {
    let chain = Chain(w.cold.iter().cloned().zip(w.warm.iter().cloned()).collect());
    StateMachine::new(
        ESCROW,
        w.info.config.clone(),
        w.info.group.clone(),
        w.info.amount,
    )
    .unwrap()
    .with_warm_resolver(Arc::new(chain))
}

fn params() -> StartParams {
    StartParams {
        prompt_hash: [9; 32],
        model: "m".into(),
        input_length: 100,
        max_tokens: 50,
        started_at: T,
    }
}

/// The receipt event of slot 1's warm key for nonce 1, over the host's root.
fn warm_receipt(w: &World, s: &Session, host: &StateMachine) -> ReceiptBody {
    let key = &w.warm[1];
    let start = s.start_of(1).unwrap();
    let root = host.state_root();
    ReceiptBody {
        state_sig: Some(state::sign_state(&root, ESCROW, 1, key).to_vec()),
        state_hash: Some(root.to_vec()),
        nonce: 1,
        receipt: Some(state::sign_receipt(&start, ESCROW, T + 1, key).to_vec()),
        confirmed_at: Some(T + 1),
    }
}

#[test]
fn an_unknown_grant_is_unresolved_then_accepted_bound_and_replayed_without_the_chain() {
    let w = world(3);
    let cache = Arc::new(GrantCache::new(Arc::new(SystemClock)));
    let mut s = Session::new(w.info.clone())
        .unwrap()
        .with_grants(cache.clone());
    let mut host = host_sm(&w);
    let d1 = s.compose_start(&params(), &w.gateway).unwrap();
    host.apply_diff(&d1, w.gateway.address()).unwrap();
    let body = warm_receipt(&w, &s, &host);
    let executor = w.cold[1].address();

    // No answer from the chain yet: typed, not an invalid signature.
    let to_check = s.signers_to_check(executor, Some(1), &body);
    assert_eq!(to_check.len(), 1, "one warm key signs both: {to_check:?}");
    assert_eq!(to_check[0].acceptance, Acceptance::Unresolved);
    assert_eq!(&to_check[0].warm, w.warm[1].address());
    assert!(matches!(
        s.process_receipt(executor, Some(1), &body),
        Err(SessionError::WarmKeyUnresolved { .. })
    ));

    // The chain said yes: accepted, and the ConfirmStart binds slot 1 when composed.
    cache.put(executor, w.warm[1].address(), true);
    assert!(s.signers_to_check(executor, Some(1), &body)[0].acceptance == Acceptance::Granted);
    s.process_receipt(executor, Some(1), &body).unwrap();
    let mut log = vec![(*d1).clone()];
    let d2 = s.compose(vec![], &w.gateway).unwrap();
    assert_eq!(s.last_warm_delta().len(), 1);
    assert_eq!(s.warm_keys().get(&1), Some(w.warm[1].address()));
    host.apply_diff(&d2, w.gateway.address()).unwrap();
    assert_eq!(host.state_root(), s.state().state_root());
    assert_eq!(host.warm_keys(), s.warm_keys());
    let mut deltas = WarmDeltas::new();
    deltas.insert(2, s.last_warm_delta().to_vec());
    log.push((*d2).clone());

    // Restart: replayed from the stored delta; an empty cache needs nothing for the bound key.
    let fresh = Arc::new(GrantCache::new(Arc::new(SystemClock)));
    let mut r = Session::restore(w.info.clone(), log.clone(), &deltas)
        .unwrap()
        .with_grants(fresh.clone());
    assert_eq!(r.state().state_root(), s.state().state_root());
    assert_eq!(r.warm_keys(), s.warm_keys());
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
        &w.warm[1],
    );
    let txs = vec![DevshardTx::new(Tx::FinishInference(finish))];
    assert!(
        r.mempool_signers_to_check(&txs).is_empty(),
        "bound: no chain question"
    );
    assert_eq!(r.process_mempool(txs), vec![1]);
    assert!(fresh.is_empty(), "the cache was never filled");
    // Without the delta the log does not replay (the warm receipt would need the chain).
    assert!(Session::restore(w.info.clone(), log, &WarmDeltas::new()).is_err());
}

#[test]
fn an_ungranted_key_is_an_invalid_receipt_and_the_cold_key_always_passes() {
    let w = world(3);
    let cache = Arc::new(GrantCache::new(Arc::new(SystemClock)));
    let mut s = Session::new(w.info.clone())
        .unwrap()
        .with_grants(cache.clone());
    let host = {
        let mut h = host_sm(&w);
        let d1 = s.compose_start(&params(), &w.gateway).unwrap();
        h.apply_diff(&d1, w.gateway.address()).unwrap();
        h
    };
    let body = warm_receipt(&w, &s, &host);
    let executor = w.cold[1].address();
    cache.put(executor, w.warm[1].address(), false);
    let to_check = s.signers_to_check(executor, Some(1), &body);
    assert!(matches!(to_check[0].acceptance, Acceptance::Rejected(_)));
    assert!(matches!(
        s.process_receipt(executor, Some(1), &body),
        Err(SessionError::InvalidStateSig(_))
    ));
    // The cold key is always fine.
    let start = s.start_of(1).unwrap();
    let root = host.state_root();
    let cold = ReceiptBody {
        state_sig: Some(state::sign_state(&root, ESCROW, 1, &w.cold[1]).to_vec()),
        receipt: Some(state::sign_receipt(&start, ESCROW, T + 1, &w.cold[1]).to_vec()),
        ..body
    };
    assert!(s.signers_to_check(executor, Some(1), &cold).is_empty());
    s.process_receipt(executor, Some(1), &cold).unwrap();
}

#[test]
fn a_host_root_without_our_warm_keys_is_named_not_a_divergence() {
    let w = world(3);
    let cache = Arc::new(GrantCache::new(Arc::new(SystemClock)));
    let mut s = Session::new(w.info.clone())
        .unwrap()
        .with_grants(cache.clone());
    let mut host = host_sm(&w);
    let d1 = s.compose_start(&params(), &w.gateway).unwrap();
    host.apply_diff(&d1, w.gateway.address()).unwrap();
    let body = warm_receipt(&w, &s, &host);
    let executor = w.cold[1].address();
    cache.put(executor, w.warm[1].address(), true);
    s.process_receipt(executor, Some(1), &body).unwrap();
    // Nonce 2 binds slot 1; a host that does not implement warm keys computes the root of the
    // same state with warm_keys_hash = sha256("").
    s.compose(vec![], &w.gateway).unwrap();
    let mut unaware = StateMachine::new(
        ESCROW,
        w.info.config.clone(),
        w.info.group.clone(),
        w.info.amount,
    )
    .unwrap();
    unaware.apply_best_effort(1, d1.txs.clone()).unwrap();
    let mut accept_all = unaware.clone().with_warm_resolver(Arc::new(Chain(
        w.cold.iter().cloned().zip(w.warm.iter().cloned()).collect(),
    )));
    accept_all
        .apply_best_effort(2, s.diff(2).unwrap().txs.clone())
        .unwrap();
    let snap = accept_all.snapshot();
    let unaware_root = {
        let mut bare = snap.clone();
        bare.warm_keys.clear();
        StateMachine::from_snapshot(bare).unwrap().state_root()
    };
    assert_ne!(unaware_root, s.state().state_root());
    let lying = ReceiptBody {
        state_hash: Some(unaware_root.to_vec()),
        state_sig: Some(state::sign_state(&unaware_root, ESCROW, 2, &w.cold[0]).to_vec()),
        nonce: 2,
        receipt: None,
        confirmed_at: None,
    };
    let err = s
        .process_receipt(w.cold[0].address(), None, &lying)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            SessionError::Unreproducible {
                nonce: 2,
                reason: devshard_actors::protocol::guard::Unreproducible::NoWarmKeys
            }
        ),
        "{err}"
    );
    assert!(err
        .to_string()
        .contains("unsupported rest_hash composition"));
}
