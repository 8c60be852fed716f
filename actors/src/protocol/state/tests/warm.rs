//! Warm keys in the state machine (docs/lifecycle.md §5): acceptance order, binding on apply, sticky
//! and exclusive bindings, the hash, replay from a stored delta and snapshots.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
};

use sha2::{Digest, Sha256};

use super::*;
use crate::protocol::{
    crypto::Address,
    state::{compose_root, InferenceStatus},
    warm::{self, GrantAnswer, NoGrants, WarmBinding, WarmKeyResolver},
};

/// A chain of grants that counts how often it is asked.
#[derive(Debug, Default)]
struct Grants {
    answers: Mutex<HashMap<(Address, Address), GrantAnswer>>,
    asked: AtomicUsize,
}

impl Grants {
    fn set(&self, validator: &Address, warm: &Address, answer: GrantAnswer) {
        self.answers
            .lock()
            .unwrap()
            .insert((validator.clone(), warm.clone()), answer);
    }
}

impl WarmKeyResolver for Grants {
    fn resolve(&self, validator: &Address, warm: &Address) -> GrantAnswer {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answers
            .lock()
            .unwrap()
            .get(&(validator.clone(), warm.clone()))
            .copied()
            .unwrap_or(GrantAnswer::NotGranted)
    }
}

fn warm_key(i: u32) -> SigningKey {
    SigningKey::derive("warm", i)
}

/// `Fx` whose machine asks `grants`, with warm key `i` granted by slot `i`'s validator for the
/// listed slots.
fn fx_with(owners: &[usize], granted: &[u32]) -> (Fx, Arc<Grants>) {
    let mut fx = Fx::new(owners);
    let grants = Arc::new(Grants::default());
    for &s in granted {
        grants.set(
            fx.sm.slot_address(s).unwrap(),
            warm_key(s).address(),
            GrantAnswer::Granted,
        );
    }
    fx.sm.set_warm_resolver(grants.clone());
    (fx, grants)
}

#[test]
fn known_answer_warm_keys_hash() {
    // Two bindings, written out byte by byte: slot 3 after slot 1 (ascending slots).
    let mut bindings = BTreeMap::new();
    bindings.insert(3, Address::unchecked("gonka1bb"));
    bindings.insert(1, Address::unchecked("gonka1a"));
    let preimage: Vec<u8> = [
        &[0x00, 0x00, 0x00, 0x01][..],                     // slot 1, big endian
        &[0x00, 0x00, 0x00, 0x07],                         // len("gonka1a") = 7
        &[0x67, 0x6f, 0x6e, 0x6b, 0x61, 0x31, 0x61],       // "gonka1a"
        &[0x00, 0x00, 0x00, 0x03],                         // slot 3
        &[0x00, 0x00, 0x00, 0x08],                         // len("gonka1bb") = 8
        &[0x67, 0x6f, 0x6e, 0x6b, 0x61, 0x31, 0x62, 0x62], // "gonka1bb"
    ]
    .concat();
    let by_hand: [u8; 32] = Sha256::digest(&preimage).into();
    assert_eq!(warm::warm_keys_hash(&bindings), by_hand);

    // And that hash is what the root commits to once those keys are bound in a session.
    let mut fx = Fx::new(&[0, 1, 2, 3]);
    fx.sm
        .inject_warm_keys(&[
            WarmBinding {
                slot: 3,
                address: Address::unchecked("gonka1bb"),
            },
            WarmBinding {
                slot: 1,
                address: Address::unchecked("gonka1a"),
            },
        ])
        .unwrap();
    let mut rest = Sha256::new();
    rest.update(fx.sm.balance().to_be_bytes());
    rest.update(fx.sm.inferences_hash());
    rest.update(by_hand);
    let rest: [u8; 32] = rest.finalize().into();
    assert_eq!(fx.sm.rest_hash(), rest);
    assert_eq!(
        fx.sm.state_root(),
        compose_root(
            &fx.sm.host_stats_hash(),
            fx.sm.fees(),
            &rest,
            fx.sm.config().protocol,
            fx.sm.phase()
        )
    );
}

#[test]
fn a_granted_warm_receipt_binds_the_slot_and_changes_the_root() {
    let (mut fx, grants) = fx_with(&[0, 1, 2], &[1]);
    let plain_root_hash = fx.sm.warm_keys_hash();
    let id = fx.start(10, 10); // executor slot 1
    let confirm = fx.confirm_by(id, T0 + 1, &warm_key(1));
    let nonce = fx.next();
    let mut probe = fx.sm.clone();
    let be = probe
        .apply_best_effort(nonce, vec![confirm.clone()])
        .unwrap();
    assert_eq!(
        be.warm_delta,
        [WarmBinding {
            slot: 1,
            address: warm_key(1).address().clone()
        }]
    );
    fx.ok(vec![confirm]);
    assert_eq!(fx.sm.record(id).unwrap().status, InferenceStatus::Started);
    assert_eq!(fx.sm.warm_keys().get(&1), Some(warm_key(1).address()));
    assert_ne!(fx.sm.warm_keys_hash(), plain_root_hash);

    // Sticky: once bound, the chain is not asked again, even after a revocation.
    grants.set(
        fx.sm.slot_address(1).unwrap(),
        warm_key(1).address(),
        GrantAnswer::NotGranted,
    );
    let asked = grants.asked.load(Ordering::SeqCst);
    let m = fx.finish_msg(id, 3, 4);
    fx.ok(vec![tx(Tx::FinishInference(sign_finish(m, &warm_key(1))))]);
    assert_eq!(fx.sm.record(id).unwrap().status, InferenceStatus::Finished);
    assert_eq!(grants.asked.load(Ordering::SeqCst), asked);
}

#[test]
fn an_ungranted_key_is_an_invalid_signature_and_changes_nothing() {
    let (mut fx, _) = fx_with(&[0, 1, 2], &[]);
    let id = fx.start(10, 10);
    let bad = fx.confirm_by(id, T0 + 1, &warm_key(1));
    fx.rejects(
        vec![bad],
        |e| matches!(e, StateError::InvalidExecutorSig(t) if t.contains("no warm-key grant")),
    );
    assert!(fx.sm.warm_keys().is_empty());
}

#[test]
fn a_bound_slot_is_exclusive_and_siblings_are_accepted_without_binding() {
    // Validator 0 holds slots 0 and 2; slot 1 belongs to validator 1.
    let (mut fx, grants) = fx_with(&[0, 1, 0], &[0]);
    let validator0 = fx.sm.slot_address(0).unwrap().clone();
    let other = SigningKey::derive("warm-other", 0);
    grants.set(&validator0, other.address(), GrantAnswer::Granted);
    fx.tick(); // nonce 1 (slot 1)
    let id0 = fx.start(10, 10); // nonce 2 → slot 2
    let id1 = fx.start(10, 10); // nonce 3 → slot 0
    assert_eq!(fx.sm.record(id1).unwrap().executor_slot, 0);
    fx.ok(vec![fx.confirm_by(id1, T0 + 1, &warm_key(0))]);
    assert_eq!(fx.sm.warm_keys().len(), 1);
    // Slot 2 is unbound and its validator's warm key is bound on slot 0: sibling, no binding,
    // no chain question.
    let asked = grants.asked.load(Ordering::SeqCst);
    assert_eq!(
        fx.sm.signer_acceptance(2, warm_key(0).address()),
        warm::Acceptance::Sibling
    );
    fx.ok(vec![fx.confirm_by(id0, T0 + 1, &warm_key(0))]);
    assert_eq!(grants.asked.load(Ordering::SeqCst), asked);
    assert_eq!(fx.sm.warm_keys().len(), 1);
    // Slot 0 is bound to warm key 0: another granted key of the same validator is rejected.
    let id2 = fx.start(10, 10); // nonce 6 → slot 0
    fx.rejects(
        vec![fx.confirm_by(id2, T0 + 1, &other)],
        |e| matches!(e, StateError::InvalidExecutorSig(t) if t.contains("bound to warm key")),
    );
    // The cold key is always accepted.
    fx.ok(vec![fx.confirm_by(id2, T0 + 1, fx.slot_key(0))]);
}

#[test]
fn an_unresolved_check_skips_the_tx_on_the_gateway_and_is_typed() {
    let (mut fx, grants) = fx_with(&[0, 1, 2], &[]);
    let id = fx.start(10, 10);
    grants.set(
        fx.sm.slot_address(1).unwrap(),
        warm_key(1).address(),
        GrantAnswer::Unknown,
    );
    let confirm = fx.confirm_by(id, T0 + 1, &warm_key(1));
    let nonce = fx.next();
    let be = fx.sm.apply_best_effort(nonce, vec![confirm]).unwrap();
    assert!(be.applied.is_empty() && be.warm_delta.is_empty());
    assert!(matches!(
        be.skipped.first(),
        Some((_, StateError::WarmKeyUnresolved { slot: 1, .. }))
    ));
}

#[test]
fn timeout_votes_and_validations_bind_their_voters() {
    let (mut fx, _) = fx_with(&[0, 1, 2, 3, 4], &[0, 2, 3]);
    let id = fx.start(10, 10); // executor slot 1
    let votes = [0, 2, 3]
        .map(|s| sign_timeout_vote(ESCROW, id, TimeoutReason::Refused, s, &warm_key(s)))
        .to_vec();
    fx.ok(vec![fx.timeout(id, TimeoutReason::Refused, votes)]);
    assert_eq!(fx.sm.record(id).unwrap().status, InferenceStatus::TimedOut);
    assert_eq!(
        fx.sm.warm_keys().keys().copied().collect::<Vec<_>>(),
        [0, 2, 3]
    );
}

#[test]
fn replay_from_the_stored_delta_needs_no_chain_and_snapshots_keep_bindings() {
    let (mut fx, _) = fx_with(&[0, 1, 2], &[1]);
    let mut log = Vec::new();
    let mut replica = fx.sm.clone().with_warm_resolver(Arc::new(NoGrants));
    for step in 0..3 {
        let txs = match step {
            0 => vec![tx(Tx::StartInference(fx.start_msg(10, 10)))],
            1 => vec![fx.confirm_by(1, T0 + 1, &warm_key(1))],
            _ => vec![],
        };
        let nonce = fx.next();
        let be = fx.sm.apply_best_effort(nonce, txs).unwrap();
        let diff = Diff::sign(nonce, be.applied, ESCROW, be.root, &fx.creator);
        log.push((diff, be.warm_delta));
    }
    for (diff, delta) in &log {
        replica.inject_warm_keys(delta).unwrap();
        replica.apply_diff(diff, fx.creator.address()).unwrap();
    }
    assert_eq!(replica, fx.sm);
    assert_eq!(replica.state_root(), fx.sm.state_root());
    // Without the delta the grant-less replica cannot accept the warm receipt.
    let mut bare = StateMachine::new(
        ESCROW,
        fx.sm.config().clone(),
        fx.sm.group().to_vec(),
        AMOUNT,
    )
    .unwrap();
    bare.apply_diff(&log[0].0, fx.creator.address()).unwrap();
    assert!(bare.apply_diff(&log[1].0, fx.creator.address()).is_err());

    let restored = StateMachine::from_snapshot(fx.sm.snapshot()).unwrap();
    assert_eq!(restored.warm_keys(), fx.sm.warm_keys());
    assert_eq!(restored.state_root(), fx.sm.state_root());
    assert!(replica
        .inject_warm_keys(&[WarmBinding {
            slot: 9,
            address: warm_key(9).address().clone()
        }])
        .is_err());
}
