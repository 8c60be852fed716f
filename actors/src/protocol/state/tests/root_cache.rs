//! The optimised root (cached entry encodings, incremental live hash, copy-on-write records)
//! against the straightforward full recomputation, on random sessions driven through best-effort
//! composition and strict apply: starts, confirms, finishes, validations, votes, timeouts,
//! frequent auto-seals, finalize → settlement, rejected diffs and direct edits.

use proptest::prelude::*;

use super::{live_set::reference_live_hash, *};
use crate::protocol::{
    crypto::sha256,
    proto::{self, MsgFinalizeRound},
    state::{compose_root, InferenceStatus, Phase},
};

/// The root exactly as it was computed before the caches: every live record re-encoded into one
/// `InferencesMapProto` and hashed.
fn reference_root(sm: &StateMachine, phase: Phase) -> [u8; 32] {
    let host_stats_hash = sha256(&proto::encode(&sm.host_stats_proto()));
    let live = reference_live_hash(sm.records());
    let inferences = sha256(&[&sm.st.sealed_acc[..], &live].concat());
    let rest = sha256(&[&sm.st.balance.to_be_bytes()[..], &inferences, &sha256(b"")].concat());
    compose_root(
        &host_stats_hash,
        sm.st.fees,
        &rest,
        sm.config().protocol,
        phase,
    )
}

fn assert_roots(sm: &StateMachine) {
    assert_eq!(sm.state_root(), reference_root(sm, sm.phase()));
    assert_eq!(
        sm.root_with_phase(Phase::Settlement),
        reference_root(sm, Phase::Settlement)
    );
    sm.st.records.check_invariants();
}

#[derive(Clone, Debug)]
enum Op {
    Start {
        input: u64,
    },
    Confirm {
        pick: usize,
    },
    Finish {
        pick: usize,
        out: u64,
    },
    Validate {
        pick: usize,
        slot: u32,
        valid: bool,
    },
    Vote {
        pick: usize,
        slot: u32,
        valid: bool,
    },
    Timeout {
        pick: usize,
    },
    /// A Start plus a confirm and a finish of older records in the same diff.
    Combo {
        input: u64,
        pick: usize,
        out: u64,
    },
    Tick,
    Finalize,
    /// The txs of a valid Start under a wrong post-state root: strict apply must fail atomically.
    BadRoot,
    /// Edits a record directly on a clone: the (unrefreshed) root must still be exact.
    Poke {
        pick: usize,
        remove: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        9 => (1u64..500).prop_map(|input| Op::Start { input }),
        4 => any::<usize>().prop_map(|pick| Op::Confirm { pick }),
        4 => (any::<usize>(), 0u64..300).prop_map(|(pick, out)| Op::Finish { pick, out }),
        3 => (any::<usize>(), 0u32..4, any::<bool>())
            .prop_map(|(pick, slot, valid)| Op::Validate { pick, slot, valid }),
        2 => (any::<usize>(), 0u32..4, any::<bool>())
            .prop_map(|(pick, slot, valid)| Op::Vote { pick, slot, valid }),
        1 => any::<usize>().prop_map(|pick| Op::Timeout { pick }),
        4 => (1u64..500, any::<usize>(), 0u64..300)
            .prop_map(|(input, pick, out)| Op::Combo { input, pick, out }),
        2 => Just(Op::Tick),
        1 => Just(Op::BadRoot),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, remove)| Op::Poke { pick, remove }),
    ]
}

/// A live record with one of `statuses`, chosen by `pick`.
fn pick(fx: &Fx, pick: usize, statuses: &[InferenceStatus]) -> Option<u64> {
    let ids: Vec<u64> = fx
        .sm
        .records()
        .filter(|r| statuses.contains(&r.status))
        .map(|r| r.inference_id)
        .collect();
    (!ids.is_empty()).then(|| ids[pick % ids.len()])
}

/// The txs for `op` (`None` when nothing fits).
fn txs(fx: &Fx, op: &Op, clock: i64) -> Option<Vec<DevshardTx>> {
    use InferenceStatus::*;
    Some(match *op {
        Op::Start { input } => vec![tx(Tx::StartInference(fx.start_msg(input, 10)))],
        Op::Confirm { pick: p } => vec![fx.confirm(pick(fx, p, &[Pending])?, clock)],
        Op::Finish { pick: p, out } => vec![fx.finish(pick(fx, p, &[Started])?, 3, out)],
        Op::Validate {
            pick: p,
            slot,
            valid,
        } => {
            let id = pick(fx, p, &[Finished, Challenged, Validated, Invalidated])?;
            vec![fx.validation(id, slot, valid)]
        }
        Op::Vote {
            pick: p,
            slot,
            valid,
        } => vec![fx.vote(pick(fx, p, &[Challenged])?, slot, valid)],
        Op::Timeout { pick: p } => {
            let id = pick(fx, p, &[Pending])?;
            let exec = fx.sm.record(id)?.executor_slot;
            let votes = (0..fx.sm.group_size() as u32)
                .filter(|s| fx.owners[*s as usize] != fx.owners[exec as usize])
                .map(|s| fx.timeout_vote(id, TimeoutReason::Refused, s))
                .collect();
            vec![fx.timeout(id, TimeoutReason::Refused, votes)]
        }
        Op::Combo {
            input,
            pick: p,
            out,
        } => {
            let mut txs = vec![tx(Tx::StartInference(fx.start_msg(input, 10)))];
            if let Some(id) = pick(fx, p, &[Pending]) {
                txs.push(fx.confirm(id, clock));
            }
            if let Some(id) = pick(fx, p / 3, &[Started]) {
                txs.push(fx.finish(id, 2, out));
            }
            txs
        }
        Op::Tick => vec![],
        Op::Finalize => vec![tx(Tx::FinalizeRound(MsgFinalizeRound {}))],
        Op::BadRoot | Op::Poke { .. } => return None,
    })
}

fn step(fx: &mut Fx, op: &Op, clock: i64) {
    match *op {
        Op::BadRoot => {
            let before = fx.sm.clone();
            let nonce = fx.next();
            let start = vec![tx(Tx::StartInference(fx.start_msg(5, 5)))];
            let diff = Diff::sign(nonce, start, ESCROW, [0; 32], &fx.creator);
            assert!(fx.sm.apply_diff(&diff, fx.creator.address()).is_err());
            assert_eq!(fx.sm, before);
            assert_eq!(fx.sm.state_root(), before.state_root());
        }
        Op::Poke { pick: p, remove } => {
            use InferenceStatus::*;
            let all = [
                Pending,
                Started,
                Finished,
                Challenged,
                Validated,
                Invalidated,
                TimedOut,
            ];
            let Some(id) = pick(fx, p, &all) else {
                return;
            };
            let mut sm = fx.sm.clone();
            if remove {
                sm.st.records.remove(&id);
            } else if let Some(mut r) = sm.st.records.get_mut(&id) {
                r.output_tokens += 1;
                r.validated_by ^= 1 << 77;
            }
            assert_roots(&sm);
            assert_ne!(sm.state_root(), fx.sm.state_root());
            assert_roots(&fx.sm);
        }
        _ => {
            if let Some(txs) = txs(fx, op, clock) {
                let before = fx.sm.clone();
                if fx.apply(txs).is_err() {
                    assert_eq!(fx.sm, before);
                }
            }
        }
    }
    assert_roots(&fx.sm);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn optimised_root_equals_the_full_recomputation(
        ops in prop::collection::vec(op(), 40..240),
        finalize_at in prop::option::of(100usize..260),
    ) {
        let cfg = SessionConfig {
            auto_seal_every_n_nonces: 8,
            inference_seal_grace_nonces: 3,
            inference_seal_grace_seconds: 20,
            ..SessionConfig::default_for_group(4)
        };
        let mut fx = Fx::with_config(&[0, 1, 2, 1], cfg);
        assert_roots(&fx.sm);
        for (i, op) in ops.iter().enumerate() {
            let op = if finalize_at == Some(i) { &Op::Finalize } else { op };
            step(&mut fx, op, T0 + i as i64);
            let restored = StateMachine::from_snapshot(fx.sm.snapshot()).unwrap();
            prop_assert_eq!(&restored, &fx.sm);
            prop_assert_eq!(restored.state_root(), fx.sm.state_root());
        }
    }
}
