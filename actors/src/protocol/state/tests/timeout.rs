//! MsgTimeoutInference: status gates, vote verification, address dedup and slot weighting.

use super::*;
use crate::protocol::state::InferenceStatus;

#[test]
fn refused_timeout_refunds_and_counts_a_miss() {
    // 5 slots, threshold 2: three distinct non-executor voters are needed.
    let mut fx = Fx::new(&[0, 1, 2, 3, 4]);
    let id = fx.start(100, 50); // nonce 1 → executor slot 1
    let b = fx.sm.balance();
    let votes = vec![
        fx.timeout_vote(id, TimeoutReason::Refused, 0),
        fx.timeout_vote(id, TimeoutReason::Refused, 2),
        fx.timeout_vote(id, TimeoutReason::Refused, 3),
    ];
    fx.ok(vec![fx.timeout(id, TimeoutReason::Refused, votes)]);
    assert_eq!(fx.sm.record(id).unwrap().status, InferenceStatus::TimedOut);
    assert_eq!(fx.sm.host_stats(1).missed, 1);
    assert_eq!(fx.sm.balance(), b + 150 - 1_000);
}

#[test]
fn execution_timeout_requires_started() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let id = fx.start(10, 10);
    let votes = vec![
        fx.timeout_vote(id, TimeoutReason::Execution, 0),
        fx.timeout_vote(id, TimeoutReason::Execution, 2),
    ];
    fx.rejects(
        vec![fx.timeout(id, TimeoutReason::Execution, votes.clone())],
        |e| matches!(e, StateError::InvalidTransition(_)),
    );
    fx.ok(vec![fx.confirm(id, T0 + 1)]);
    let refused = vec![
        fx.timeout_vote(id, TimeoutReason::Refused, 0),
        fx.timeout_vote(id, TimeoutReason::Refused, 2),
    ];
    fx.rejects(vec![fx.timeout(id, TimeoutReason::Refused, refused)], |e| {
        matches!(e, StateError::InvalidTransition(_))
    });
    fx.ok(vec![fx.timeout(
        id,
        TimeoutReason::Execution,
        votes.clone(),
    )]);
    assert_eq!(fx.sm.record(id).unwrap().status, InferenceStatus::TimedOut);
    assert_eq!(fx.sm.host_stats(1).missed, 1);
    // Terminal: a second timeout is a wrong transition.
    fx.rejects(
        vec![fx.timeout(id, TimeoutReason::Execution, votes.clone())],
        |e| matches!(e, StateError::InvalidTransition(_)),
    );
}

#[test]
fn accept_weight_must_be_strictly_above_the_threshold() {
    let mut fx = Fx::new(&[0, 1, 2, 3]); // threshold 2
    let id = fx.start(10, 10);
    let two = vec![
        fx.timeout_vote(id, TimeoutReason::Refused, 0),
        fx.timeout_vote(id, TimeoutReason::Refused, 2),
    ];
    fx.rejects(vec![fx.timeout(id, TimeoutReason::Refused, two)], |e| {
        *e == StateError::InsufficientVotes {
            threshold: 2,
            got: 2,
        }
    });
    // A rejecting vote is verified over its own accept flag but adds no weight.
    let mut rejecting = fx.timeout_vote(id, TimeoutReason::Refused, 3);
    rejecting.accept = false;
    rejecting.signature = fx
        .slot_key(3)
        .sign(&crate::protocol::state::timeout_vote_content_with(
            ESCROW, id, 1, false,
        ))
        .to_vec();
    let votes = vec![
        fx.timeout_vote(id, TimeoutReason::Refused, 0),
        fx.timeout_vote(id, TimeoutReason::Refused, 2),
        rejecting,
    ];
    fx.rejects(vec![fx.timeout(id, TimeoutReason::Refused, votes)], |e| {
        *e == StateError::InsufficientVotes {
            threshold: 2,
            got: 2,
        }
    });
}

#[test]
fn multi_slot_voters_weigh_their_slot_count_and_vote_once() {
    // Host 0 holds slots 0, 2 and 3; threshold 2; executor of nonce 1 is slot 1 (host 1).
    let mut fx = Fx::new(&[0, 1, 0, 0]);
    let id = fx.start(10, 10);
    let dup = vec![
        fx.timeout_vote(id, TimeoutReason::Refused, 0),
        fx.timeout_vote(id, TimeoutReason::Refused, 2),
    ];
    fx.rejects(vec![fx.timeout(id, TimeoutReason::Refused, dup)], |e| {
        matches!(e, StateError::DuplicateVote(_))
    });
    let one = vec![fx.timeout_vote(id, TimeoutReason::Refused, 3)];
    fx.ok(vec![fx.timeout(id, TimeoutReason::Refused, one)]);
    assert_eq!(fx.sm.record(id).unwrap().status, InferenceStatus::TimedOut);
}

#[test]
fn vote_signature_rejections() {
    let mut fx = Fx::new(&[0, 1, 2, 3, 4]);
    let id = fx.start(10, 10);
    let r = TimeoutReason::Refused;
    // The executor cannot vote for its own timeout.
    let with_executor = vec![
        fx.timeout_vote(id, r, 0),
        fx.timeout_vote(id, r, 1),
        fx.timeout_vote(id, r, 2),
    ];
    fx.rejects(vec![fx.timeout(id, r, with_executor)], |e| {
        matches!(e, StateError::InvalidVoteSig(_))
    });
    // A vote signed by someone else than the slot owner.
    let mut forged = fx.timeout_vote(id, r, 3);
    forged.voter_slot = 4;
    let votes = vec![fx.timeout_vote(id, r, 0), fx.timeout_vote(id, r, 2), forged];
    fx.rejects(vec![fx.timeout(id, r, votes)], |e| {
        matches!(e, StateError::InvalidVoteSig(_))
    });
    // A vote signed for the other reason.
    let wrong_reason = fx.timeout_vote(id, TimeoutReason::Execution, 3);
    let votes = vec![
        fx.timeout_vote(id, r, 0),
        fx.timeout_vote(id, r, 2),
        wrong_reason,
    ];
    fx.rejects(vec![fx.timeout(id, r, votes)], |e| {
        matches!(e, StateError::InvalidVoteSig(_))
    });
    let mut outsider = fx.timeout_vote(id, r, 0);
    outsider.voter_slot = 9;
    fx.rejects(vec![fx.timeout(id, r, vec![outsider])], |e| {
        *e == StateError::SlotNotInGroup(9)
    });
    let unknown = tx(Tx::TimeoutInference(MsgTimeoutInference {
        inference_id: id,
        reason: 0,
        votes: vec![],
    }));
    fx.rejects(vec![unknown], |e| *e == StateError::InvalidTimeoutReason(0));
    fx.rejects(vec![fx.timeout(77, r, vec![])], |e| {
        *e == StateError::InferenceNotFound(77)
    });
}
