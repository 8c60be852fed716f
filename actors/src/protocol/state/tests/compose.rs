//! Finish, best-effort composition, the per-nonce fee and the ignored/empty tx kinds.

use super::*;
use crate::protocol::state::{InferenceStatus, ShortBytes};

#[test]
fn finish_settles_the_actual_cost() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let id = fx.start(100, 50);
    fx.ok(vec![fx.confirm(id, T0 + 1)]);
    let b = fx.sm.balance();
    fx.ok(vec![fx.finish(id, 30, 20)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.actual_cost, r.output_tokens),
        (InferenceStatus::Finished, 50, 20)
    );
    assert_eq!(r.response_hash, vec![9; 32]);
    assert_eq!(fx.sm.balance(), b + 100 - 1_000);
    assert_eq!(fx.sm.host_stats(1).cost, 50);
    // Capped at the reserve.
    let id = fx.start(10, 10);
    fx.ok(vec![fx.confirm(id, T0 + 1)]);
    fx.ok(vec![fx.finish(id, 500, 500)]);
    assert_eq!(fx.sm.record(id).unwrap().actual_cost, 20);
    assert_eq!(fx.sm.host_stats(1).cost, 70); // nonce 4 → slot 1 again
}

#[test]
fn finish_rejections() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let id = fx.start(100, 50);
    fx.rejects(vec![fx.finish(id, 1, 1)], |e| {
        matches!(e, StateError::InvalidTransition(_))
    });
    fx.ok(vec![fx.confirm(id, T0 + 1)]);
    let mut wrong_slot = fx.finish_msg(id, 1, 1);
    wrong_slot.executor_slot = 2;
    let wrong_slot = tx(Tx::FinishInference(sign_finish(wrong_slot, fx.slot_key(2))));
    fx.rejects(vec![wrong_slot], |e| {
        matches!(
            e,
            StateError::WrongExecutorSlot {
                expected: 1,
                got: 2
            }
        )
    });
    let by_other = tx(Tx::FinishInference(sign_finish(
        fx.finish_msg(id, 1, 1),
        fx.slot_key(0),
    )));
    fx.rejects(vec![by_other], |e| {
        matches!(e, StateError::InvalidProposerSig(_))
    });
    let mut other_escrow = fx.finish_msg(id, 1, 1);
    other_escrow.escrow_id = "43".into();
    let other_escrow = tx(Tx::FinishInference(sign_finish(
        other_escrow,
        fx.slot_key(1),
    )));
    fx.rejects(vec![other_escrow], |e| {
        matches!(e, StateError::EscrowIDMismatch { .. })
    });
    let mut overflow = fx.finish_msg(id, u64::MAX, 1);
    overflow.executor_slot = 1;
    let overflow = tx(Tx::FinishInference(sign_finish(overflow, fx.slot_key(1))));
    fx.rejects(vec![overflow], |e| *e == StateError::CostOverflow);
}

#[test]
fn best_effort_skips_failures_but_a_failing_start_aborts() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let id = fx.start(10, 10);
    let nonce = fx.next();
    let bad = fx.finish(id, 1, 1); // not started yet
    let good = fx.confirm(id, T0 + 1);
    let empty = DevshardTx { tx: None };
    let be = fx
        .sm
        .clone()
        .apply_best_effort(nonce, vec![bad.clone(), good.clone(), empty])
        .unwrap();
    assert_eq!(be.applied, vec![good.clone()]);
    assert_eq!(be.skipped.len(), 2);
    assert!(matches!(be.skipped[0].1, StateError::InvalidTransition(_)));
    assert_eq!(be.skipped[1].1, StateError::EmptyTx);
    // The strict host rejects the unfiltered diff; the filtered one gives the same root.
    let before = fx.sm.clone();
    let diff = Diff::sign(nonce, vec![bad, good.clone()], ESCROW, be.root, &fx.creator);
    assert!(fx.sm.apply_diff(&diff, fx.creator.address()).is_err());
    assert_eq!(fx.sm, before);
    let diff = Diff::sign(nonce, be.applied, ESCROW, be.root, &fx.creator);
    fx.sm.apply_diff(&diff, fx.creator.address()).unwrap();
    // A start that cannot reserve aborts the whole composition and changes nothing.
    let before = fx.sm.clone();
    let huge = tx(Tx::StartInference(fx.start_msg(AMOUNT, 0)));
    let err = fx
        .sm
        .apply_best_effort(fx.next(), vec![fx.finish(id, 1, 1), huge])
        .unwrap_err();
    assert_eq!(err, StateError::InsufficientBalance);
    assert_eq!(fx.sm, before);
}

#[test]
fn fee_shortfall_rejects_the_nonce() {
    let cfg = SessionConfig {
        fee_per_nonce: 400_000,
        ..SessionConfig::default_for_group(3)
    };
    let mut fx = Fx::with_config(&[0, 1, 2], cfg);
    fx.tick();
    fx.tick();
    let before = fx.sm.clone();
    assert_eq!(
        fx.sm.apply_best_effort(3, vec![]).unwrap_err(),
        StateError::InsufficientBalance
    );
    assert_eq!(fx.sm, before);
}

#[test]
fn reveal_seed_is_ignored_and_empty_tx_rejected() {
    let mut fx = Fx::new(&[0, 1, 2]);
    fx.ok(vec![tx(Tx::RevealSeed(Default::default()))]);
    fx.rejects(vec![DevshardTx { tx: None }], |e| *e == StateError::EmptyTx);
}

#[test]
fn snapshot_round_trips_through_json() {
    let mut fx = Fx::new(&[0, 1, 2, 0]);
    let id = fx.finished(3, 4);
    fx.ok(vec![fx.validation(id, 3, false)]); // validated_by uses high bits of the bitmap
    fx.start(5, 5);
    let snap = fx.sm.snapshot();
    let json = serde_json::to_string(&snap).unwrap();
    let back: crate::protocol::state::StateSnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snap);
    let restored = StateMachine::from_snapshot(back).unwrap();
    assert_eq!(restored, fx.sm);
    assert_eq!(restored.state_root(), fx.sm.state_root());
    // Diffs keep applying on the restored machine.
    fx.sm = restored;
    fx.tick();
    let mut bad = snap.clone();
    bad.host_stats.pop();
    assert!(StateMachine::from_snapshot(bad).is_err());
    let mut bad = snap.clone();
    bad.sealed_acc = "00".into();
    assert!(StateMachine::from_snapshot(bad).is_err());
    let mut bad = snap;
    bad.records[0].executor_slot = 9;
    assert!(StateMachine::from_snapshot(bad).is_err());
}

#[test]
fn live_records_share_their_model_and_hold_their_hashes_inline() {
    // Issue 16: a live record was ≈ 290 B with its model and two hashes on the heap.
    assert!(std::mem::size_of::<crate::protocol::state::InferenceRecord>() <= 208);
    let mut fx = Fx::new(&[0, 1, 2]);
    let a = fx.start(100, 50);
    let b = fx.start(10, 5);
    fx.ok(vec![fx.confirm(b, T0 + 1)]);
    fx.ok(vec![fx.finish(b, 3, 4)]);
    let (ra, rb) = (fx.sm.record(a).unwrap(), fx.sm.record(b).unwrap());
    assert!(std::sync::Arc::ptr_eq(&ra.model, &rb.model));
    assert!(matches!(
        rb.response_hash,
        ShortBytes::Inline { len: 32, .. }
    ));
    // A snapshot restored shares them again, and is the same state.
    let back = StateMachine::from_snapshot(fx.sm.snapshot()).unwrap();
    let (ra, rb) = (back.record(a).unwrap(), back.record(b).unwrap());
    assert!(std::sync::Arc::ptr_eq(&ra.model, &rb.model));
    assert_eq!(back, fx.sm);
}
