//! MsgValidation and MsgValidationVote.

use super::*;
use crate::protocol::state::InferenceStatus;

#[test]
fn valid_validation_counts_weight_and_keeps_finished() {
    let mut fx = Fx::new(&[0, 1, 0, 2]); // host 0 holds slots 0 and 2
    let id = fx.finished(10, 10); // executor slot 1
    let stats_before: Vec<_> = (0..4).map(|s| fx.sm.host_stats(s)).collect();
    fx.ok(vec![fx.validation(id, 2, true)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.votes_valid, r.validated_by),
        (InferenceStatus::Finished, 2, 0b100),
        "the address's weight counts, only the emitting slot's bit is set"
    );
    // Idempotent per address (via the other slot too): a no-op that still applies.
    let before = fx.sm.record(id).cloned();
    fx.ok(vec![
        fx.validation(id, 0, false),
        fx.validation(id, 2, true),
    ]);
    assert_eq!(fx.sm.record(id).cloned(), before);
    let stats_after: Vec<_> = (0..4).map(|s| fx.sm.host_stats(s)).collect();
    assert_eq!(
        stats_after, stats_before,
        "validations never touch host_stats"
    );
}

/// The multi-slot rule on its own (docs/versions.md "Validation accounting"): a validator holding
/// several slots sets only the bit of the slot it emitted from, yet any of its slots makes a
/// later validation from the same address a no-op, and its weight is its slot count.
#[test]
fn multi_slot_validator_sets_only_the_emitting_slot_bit() {
    // Host 0 holds slots 0, 2 and 4; host 1 executes (slot 1); host 2 holds slot 3.
    let mut fx = Fx::new(&[0, 1, 0, 2, 0]);
    let id = fx.finished(10, 10);
    fx.ok(vec![fx.validation(id, 4, false)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(r.validated_by, 1 << 4);
    assert_eq!(r.votes_invalid, 3, "weight of the address: three slots");
    assert_eq!(r.status, InferenceStatus::Challenged);
    // The same address from another slot: no-op (neither bit 0 nor more weight).
    fx.ok(vec![fx.validation(id, 0, true)]);
    assert_eq!(fx.sm.record(id).unwrap().validated_by, 1 << 4);
    assert_eq!(fx.sm.record(id).unwrap().votes_valid, 0);
    // Another address on a Challenged record: only its bit.
    fx.ok(vec![fx.validation(id, 3, true)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(r.validated_by, (1 << 4) | (1 << 3));
    assert_eq!((r.votes_valid, r.votes_invalid), (0, 3));
    for slot in 0..5 {
        let s = fx.sm.host_stats(slot);
        assert_eq!((s.completed_validations, s.required_validations), (0, 0));
    }
}

#[test]
fn invalid_validation_challenges() {
    let mut fx = Fx::new(&[0, 1, 2, 3]);
    let id = fx.finished(10, 10);
    fx.ok(vec![fx.validation(id, 0, false)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.votes_invalid),
        (InferenceStatus::Challenged, 1)
    );
    // Further validations on a challenged record only mark the bitmap.
    fx.ok(vec![fx.validation(id, 2, true)]);
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.votes_valid, r.validated_by),
        (InferenceStatus::Challenged, 0, 0b101)
    );
    assert_eq!(fx.sm.host_stats(2).completed_validations, 0);
}

#[test]
fn validation_rejections() {
    let mut fx = Fx::new(&[0, 1, 2, 1]); // host 1 holds slots 1 and 3
    let id = fx.start(10, 10); // executor slot 1
    fx.rejects(vec![fx.validation(id, 0, true)], |e| {
        matches!(e, StateError::InvalidTransition(_))
    });
    fx.ok(vec![fx.confirm(id, T0 + 1)]);
    fx.ok(vec![fx.finish(id, 1, 1)]);
    fx.rejects(vec![fx.validation(id, 1, true)], |e| {
        *e == StateError::SelfValidation
    });
    fx.rejects(vec![fx.validation(id, 3, true)], |e| {
        *e == StateError::SelfValidation
    });
    let mut forged = fx.validation(id, 0, true);
    if let Some(Tx::Validation(m)) = &mut forged.tx {
        m.validator_slot = 2;
    }
    fx.rejects(vec![forged], |e| {
        matches!(e, StateError::InvalidProposerSig(_))
    });
    let m = MsgValidation {
        inference_id: id,
        validator_slot: 0,
        valid: true,
        proposer_sig: vec![],
        escrow_id: "43".into(),
    };
    let other = tx(Tx::Validation(sign_validation(m, fx.slot_key(0))));
    fx.rejects(vec![other], |e| {
        matches!(e, StateError::EscrowIDMismatch { .. })
    });
    let m = MsgValidation {
        inference_id: id,
        validator_slot: 7,
        valid: true,
        proposer_sig: vec![],
        escrow_id: ESCROW.into(),
    };
    let outsider = tx(Tx::Validation(sign_validation(m, fx.slot_key(0))));
    fx.rejects(vec![outsider], |e| *e == StateError::SlotNotInGroup(7));
}

#[test]
fn votes_invalidate_and_refund() {
    let mut fx = Fx::new(&[0, 1, 2, 3, 4]); // threshold 2
    let id = fx.finished(30, 20); // actual cost 50, executor slot 1
    assert_eq!(fx.sm.host_stats(1).cost, 50);
    fx.ok(vec![fx.validation(id, 0, false)]); // invalid weight 1
    fx.ok(vec![fx.vote(id, 2, false)]); // 2: not yet above
    assert_eq!(
        fx.sm.record(id).unwrap().status,
        InferenceStatus::Challenged
    );
    let b = fx.sm.balance();
    fx.ok(vec![fx.vote(id, 3, false)]); // 3 > 2
    let r = fx.sm.record(id).unwrap();
    assert_eq!(
        (r.status, r.votes_invalid, r.validated_by),
        (InferenceStatus::Invalidated, 3, 0b1101)
    );
    assert_eq!(fx.sm.balance(), b + 50 - 1_000);
    let s = fx.sm.host_stats(1);
    assert_eq!((s.invalid, s.cost), (1, 0));
    // Resolved: further votes are no-ops.
    fx.ok(vec![fx.vote(id, 4, true)]);
    assert_eq!(fx.sm.record(id).unwrap().votes_valid, 0);
}

#[test]
fn votes_validate() {
    let mut fx = Fx::new(&[0, 1, 2, 3, 2]); // host 2 holds slots 2 and 4
    let id = fx.finished(1, 1);
    fx.ok(vec![fx.validation(id, 0, false)]);
    fx.ok(vec![fx.vote(id, 3, true), fx.vote(id, 4, true)]); // 1 + 2 = 3 > 2
    let r = fx.sm.record(id).unwrap();
    assert_eq!((r.status, r.votes_valid), (InferenceStatus::Validated, 3));
    assert_eq!(fx.sm.host_stats(1).invalid, 0);
}

#[test]
fn vote_rejections() {
    let mut fx = Fx::new(&[0, 1, 2, 3, 4]);
    let id = fx.finished(1, 1);
    fx.rejects(vec![fx.vote(id, 2, true)], |e| {
        matches!(e, StateError::InvalidTransition(_))
    });
    fx.ok(vec![fx.validation(id, 0, false)]);
    fx.rejects(vec![fx.vote(id, 0, false)], |e| {
        matches!(e, StateError::DuplicateVote(_))
    });
    fx.rejects(vec![fx.vote(id, 1, true)], |e| {
        *e == StateError::SelfValidation
    });
    fx.rejects(vec![fx.vote(id, 2, true), fx.vote(id, 2, true)], |e| {
        matches!(e, StateError::DuplicateVote(_))
    });
    let mut forged = fx.vote(id, 2, true);
    if let Some(Tx::ValidationVote(m)) = &mut forged.tx {
        m.vote_valid = false;
    }
    fx.rejects(vec![forged], |e| {
        matches!(e, StateError::InvalidProposerSig(_))
    });
    let m = MsgValidationVote {
        inference_id: id,
        voter_slot: 2,
        vote_valid: true,
        proposer_sig: vec![],
        escrow_id: "43".into(),
    };
    let other = tx(Tx::ValidationVote(sign_validation_vote(m, fx.slot_key(2))));
    fx.rejects(vec![other], |e| {
        matches!(e, StateError::EscrowIDMismatch { .. })
    });
}
