//! Creation, sequencing, user signature and root checks, Start and ConfirmStart.

use super::*;
use crate::protocol::state::{InferenceStatus, Phase};
use crate::protocol::{crypto::SigningKey, proto::MsgFinalizeRound};

fn group(n: u32) -> Vec<Slot> {
    (0..n)
        .map(|i| Slot {
            slot_id: i,
            validator: SigningKey::derive("g", i).address().clone(),
        })
        .collect()
}

#[test]
fn new_validates_the_group_and_charges_the_creation_fee() {
    let cfg = SessionConfig::default_for_group(3);
    let sm = StateMachine::new("7", cfg.clone(), group(3), 50_000).unwrap();
    assert_eq!(
        (sm.balance(), sm.fees(), sm.latest_nonce()),
        (40_000, 10_000, 0)
    );
    assert_eq!(sm.phase(), Phase::Active);
    assert_eq!(sm.executor_slot(4).slot_id, 1);
    assert_eq!(sm.quorum_threshold(), 3);
    let err = |g: Vec<Slot>| StateMachine::new("7", cfg.clone(), g, 50_000).unwrap_err();
    assert!(matches!(err(vec![]), StateError::InvalidGroup(_)));
    assert!(matches!(err(group(129)), StateError::InvalidGroup(_)));
    let mut shuffled = group(3);
    shuffled.swap(0, 1);
    assert!(matches!(err(shuffled), StateError::InvalidGroup(_)));
    assert_eq!(
        StateMachine::new("7", cfg, group(3), 9_999).unwrap_err(),
        StateError::InsufficientBalance
    );
    assert!(StateMachine::new(
        "7",
        SessionConfig::default_for_group(128),
        group(128),
        10_000
    )
    .is_ok());
}

#[test]
fn multi_slot_lookups() {
    let fx = Fx::new(&[0, 1, 0, 2]);
    let a = fx.hosts[0].address();
    assert_eq!(fx.sm.slots_of(a), vec![0, 2]);
    assert_eq!(fx.sm.weight_of(a), 2);
    assert_eq!(fx.sm.slot_mask(a), 0b101);
    assert_eq!(fx.sm.host_stats(99), Default::default());
}

#[test]
fn nonces_must_be_sequential() {
    let mut fx = Fx::new(&[0, 1, 2]);
    fx.tick();
    let before = fx.sm.clone();
    for nonce in [1, 3] {
        let diff = Diff::sign(nonce, vec![], ESCROW, fx.sm.state_root(), &fx.creator);
        let err = fx.sm.apply_diff(&diff, fx.creator.address()).unwrap_err();
        assert!(err.is_invalid_nonce(), "{err}");
        assert_eq!(
            err.to_string(),
            format!("invalid nonce: must be sequential: expected 2, got {nonce}")
        );
        assert!(fx
            .sm
            .apply_best_effort(nonce, vec![])
            .unwrap_err()
            .is_invalid_nonce());
    }
    assert_eq!(fx.sm, before);
}

#[test]
fn empty_diff_charges_the_fee() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let (b, f) = (fx.sm.balance(), fx.sm.fees());
    fx.tick();
    assert_eq!((fx.sm.balance(), fx.sm.fees()), (b - 1_000, f + 1_000));
}

#[test]
fn user_sig_must_come_from_the_creator_and_root_must_match() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let mut probe = fx.sm.clone();
    let root = probe.apply_best_effort(1, vec![]).unwrap().root;
    let stranger = SigningKey::derive("stranger", 0);
    let forged = Diff::sign(1, vec![], ESCROW, root, &stranger);
    let err = fx.sm.apply_diff(&forged, fx.creator.address()).unwrap_err();
    assert!(matches!(err, StateError::InvalidUserSig(_)), "{err}");
    let other_escrow = Diff::sign(1, vec![], "43", root, &fx.creator);
    assert!(fx
        .sm
        .apply_diff(&other_escrow, fx.creator.address())
        .is_err());
    let wrong_root = Diff::sign(1, vec![], ESCROW, [0; 32], &fx.creator);
    let err = fx
        .sm
        .apply_diff(&wrong_root, fx.creator.address())
        .unwrap_err();
    assert!(err.is_post_state_root_mismatch());
    assert_eq!(
        err.to_string(),
        format!(
            "post_state_root does not match computed state root: diff {}, computed {}",
            hex::encode([0u8; 32]),
            hex::encode(root)
        )
    );
    assert_eq!(fx.sm.latest_nonce(), 0);
    // Upstream skips the root check when post_state_root is empty.
    let mut legacy = Diff::sign(1, vec![], ESCROW, root, &fx.creator);
    legacy.post_state_root.clear();
    legacy.user_sig = fx.creator.sign(&legacy.signed_content(ESCROW)).to_vec();
    fx.sm.apply_diff(&legacy, fx.creator.address()).unwrap();
    assert_eq!(fx.sm.state_root(), root);
}

#[test]
fn start_reserves_and_records_pending() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let b = fx.sm.balance();
    let id = fx.start(100, 50);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.executor_slot, r.reserved_cost),
        (InferenceStatus::Pending, 1, 150)
    );
    assert_eq!(fx.sm.balance(), b - 150 - 1_000);
}

#[test]
fn start_rejections() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let mut wrong_id = fx.start_msg(1, 1);
    wrong_id.inference_id += 1;
    fx.rejects(vec![tx(Tx::StartInference(wrong_id))], |e| {
        *e == StateError::InvalidInferenceID
    });
    let s = tx(Tx::StartInference(fx.start_msg(1, 1)));
    fx.rejects(vec![s.clone(), s], |e| *e == StateError::MultipleStartMsgs);
    let huge = fx.start_msg(AMOUNT, 0);
    fx.rejects(vec![tx(Tx::StartInference(huge))], |e| {
        *e == StateError::InsufficientBalance
    });
    let overflow = fx.start_msg(u64::MAX, 1);
    fx.rejects(vec![tx(Tx::StartInference(overflow))], |e| {
        *e == StateError::CostOverflow
    });
    // The id is always the fresh nonce, so a duplicate can only be provoked directly.
    let mut sm = fx.sm.clone();
    let m = fx.start_msg(1, 1);
    sm.apply_tx(m.inference_id, &tx(Tx::StartInference(m.clone())))
        .unwrap();
    let err = sm
        .apply_tx(m.inference_id, &tx(Tx::StartInference(m)))
        .unwrap_err();
    assert_eq!(err, StateError::DuplicateInferenceID);
    fx.ok(vec![tx(Tx::FinalizeRound(MsgFinalizeRound {}))]);
    let late = fx.start_msg(1, 1);
    fx.rejects(vec![tx(Tx::StartInference(late))], |e| {
        *e == StateError::SessionFinalizing
    });
}

#[test]
fn confirm_start_verifies_the_executor_receipt() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let id = fx.start(10, 10);
    let intruder = fx.confirm_by(id, T0 + 2, &fx.hosts[0].clone());
    fx.rejects(vec![intruder], |e| {
        matches!(e, StateError::InvalidExecutorSig(_))
    });
    let mut tampered = fx.confirm(id, T0 + 2);
    if let Some(Tx::ConfirmStart(m)) = &mut tampered.tx {
        m.confirmed_at += 1;
    }
    fx.rejects(vec![tampered], |e| {
        matches!(e, StateError::InvalidExecutorSig(_))
    });
    let mut short = fx.confirm(id, T0 + 2);
    if let Some(Tx::ConfirmStart(m)) = &mut short.tx {
        m.executor_sig.truncate(64);
    }
    fx.rejects(vec![short], |e| {
        matches!(e, StateError::InvalidExecutorSig(_))
    });
    fx.rejects(vec![fx.confirm_by(99, T0, &fx.hosts[0].clone())], |e| {
        *e == StateError::InferenceNotFound(99)
    });
    fx.ok(vec![fx.confirm(id, T0 + 2)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.confirmed_at),
        (InferenceStatus::Started, T0 + 2)
    );
    fx.rejects(vec![fx.confirm(id, T0 + 3)], |e| {
        matches!(e, StateError::InvalidTransition(_))
    });
}
