//! Property and known-answer tests of the devshard state machine, driven like production: the
//! gateway composes every diff best-effort and signs it with `Diff::sign`, an independent host
//! machine applies it strictly with `apply_diff`. All signatures are real secp256k1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use devshard_actors::protocol::{
    crypto::{recover_address, sha256, SigningKey},
    diff::Diff,
    proto::{
        self, DevshardTx, DiffContent, MsgConfirmStart, MsgFinalizeRound, MsgFinishInference,
        MsgStartInference, MsgTimeoutInference, MsgValidation, MsgValidationVote, TimeoutReason,
        Tx,
    },
    state::{
        finish_unsigned_bytes, receipt_content, sign_finish, sign_receipt, sign_timeout_vote,
        sign_validation, sign_validation_vote, state_sig_content, timeout_vote_content,
        InferenceStatus, Phase, SessionConfig, Slot, StateError, StateMachine,
    },
};
use proptest::prelude::*;
use prost::Message;

const ESCROW: &str = "42";
const T0: i64 = 1_700_000_000;
/// Slot → host; host 1 holds two slots so address dedup and slot weights are exercised.
const OWNERS: [usize; 5] = [0, 1, 2, 3, 1];

/// One requested action; `pick` selects among the records that fit, at compose time.
#[derive(Clone, Debug)]
enum Op {
    Start {
        input: u64,
        max: u64,
    },
    Confirm {
        pick: usize,
        dt: i64,
    },
    Finish {
        pick: usize,
        input: u64,
        output: u64,
    },
    Timeout {
        pick: usize,
        voters: u8,
    },
    Validate {
        pick: usize,
        slot: u32,
        valid: bool,
    },
    /// One vote per slot in `voters` (bit `s` of `valid` is slot `s`'s verdict).
    Votes {
        pick: usize,
        voters: u8,
        valid: u8,
    },
    /// A ConfirmStart signed by a non-executor: must always be skipped.
    Forged {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..3_000, 1u64..500).prop_map(|(input, max)| Op::Start { input, max }),
        3 => (any::<usize>(), 0i64..300).prop_map(|(pick, dt)| Op::Confirm { pick, dt }),
        3 => (any::<usize>(), 0u64..2_000, 0u64..2_000)
            .prop_map(|(pick, input, output)| Op::Finish { pick, input, output }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(pick, voters)| Op::Timeout { pick, voters }),
        2 => (any::<usize>(), 0u32..5, any::<bool>())
            .prop_map(|(pick, slot, valid)| Op::Validate { pick, slot, valid }),
        3 => (
            any::<usize>(),
            prop_oneof![Just(0xffu8), any::<u8>()],
            prop_oneof![Just(0u8), Just(0xffu8), any::<u8>()],
        )
            .prop_map(|(pick, voters, valid)| Op::Votes { pick, voters, valid }),
        1 => any::<usize>().prop_map(|pick| Op::Forged { pick }),
    ]
}

struct World {
    gateway: StateMachine,
    host: StateMachine,
    creator: SigningKey,
    hosts: Vec<SigningKey>,
}

fn config() -> SessionConfig {
    SessionConfig {
        auto_seal_every_n_nonces: 8,
        inference_seal_grace_nonces: 3,
        inference_seal_grace_seconds: 200,
        ..SessionConfig::default_for_group(OWNERS.len())
    }
}

impl World {
    fn new(amount: u64) -> World {
        let hosts: Vec<SigningKey> = (0..4).map(|i| SigningKey::derive("prop-host", i)).collect();
        let group: Vec<Slot> = OWNERS
            .iter()
            .enumerate()
            .map(|(i, h)| Slot {
                slot_id: i as u32,
                validator: hosts[*h].address().clone(),
            })
            .collect();
        let gateway = StateMachine::new(ESCROW, config(), group.clone(), amount).unwrap();
        let host = StateMachine::new(ESCROW, config(), group, amount).unwrap();
        World {
            gateway,
            host,
            creator: SigningKey::derive("prop-creator", 0),
            hosts,
        }
    }

    fn key(&self, slot: u32) -> &SigningKey {
        &self.hosts[OWNERS[slot as usize]]
    }

    fn ids(&self, statuses: &[InferenceStatus]) -> Vec<u64> {
        self.gateway
            .records()
            .filter(|r| statuses.contains(&r.status))
            .map(|r| r.inference_id)
            .collect()
    }

    fn pick(&self, statuses: &[InferenceStatus], pick: usize) -> Option<u64> {
        let ids = self.ids(statuses);
        (!ids.is_empty()).then(|| ids[pick % ids.len()])
    }

    fn start_of(&self, id: u64) -> MsgStartInference {
        let r = self.gateway.record(id).unwrap();
        MsgStartInference {
            inference_id: id,
            prompt_hash: r.prompt_hash.to_vec(),
            model: r.model.to_string(),
            input_length: r.input_length,
            max_tokens: r.max_tokens,
            started_at: r.started_at,
        }
    }

    /// Builds the candidate txs for one op against the gateway's current state.
    fn build(&self, nonce: u64, op: &Op) -> Option<Vec<DevshardTx>> {
        use InferenceStatus::*;
        let t = match op {
            Op::Start { input, max } => Tx::StartInference(MsgStartInference {
                inference_id: nonce,
                prompt_hash: sha256(&nonce.to_be_bytes()).to_vec(),
                model: "m".into(),
                input_length: *input,
                max_tokens: *max,
                started_at: T0 + nonce as i64 * 60,
            }),
            Op::Confirm { pick, dt } => {
                let id = self.pick(&[Pending], *pick)?;
                let slot = self.gateway.record(id)?.executor_slot;
                let confirmed_at = T0 + nonce as i64 * 60 + dt;
                let sig = sign_receipt(&self.start_of(id), ESCROW, confirmed_at, self.key(slot));
                Tx::ConfirmStart(MsgConfirmStart {
                    inference_id: id,
                    executor_sig: sig.to_vec(),
                    confirmed_at,
                })
            }
            Op::Forged { pick } => {
                let id = self.pick(&[Pending], *pick)?;
                let slot = self.gateway.record(id)?.executor_slot;
                let wrong = (slot + 1) % OWNERS.len() as u32;
                let sig = sign_receipt(&self.start_of(id), ESCROW, T0, self.key(wrong));
                Tx::ConfirmStart(MsgConfirmStart {
                    inference_id: id,
                    executor_sig: sig.to_vec(),
                    confirmed_at: T0,
                })
            }
            Op::Finish {
                pick,
                input,
                output,
            } => {
                let id = self.pick(&[Started], *pick)?;
                let slot = self.gateway.record(id)?.executor_slot;
                let m = MsgFinishInference {
                    inference_id: id,
                    response_hash: vec![(id % 251) as u8; 32],
                    input_tokens: *input,
                    output_tokens: *output,
                    executor_slot: slot,
                    proposer_sig: Vec::new(),
                    escrow_id: ESCROW.into(),
                };
                Tx::FinishInference(sign_finish(m, self.key(slot)))
            }
            Op::Timeout { pick, voters } => {
                let id = self.pick(&[Pending, Started], *pick)?;
                let r = self.gateway.record(id)?;
                let reason = if r.status == Pending {
                    TimeoutReason::Refused
                } else {
                    TimeoutReason::Execution
                };
                let executor = OWNERS[r.executor_slot as usize];
                let mut seen = Vec::new();
                let mut votes = Vec::new();
                for slot in 0..OWNERS.len() as u32 {
                    let owner = OWNERS[slot as usize];
                    if voters & (1 << slot) != 0 && owner != executor && !seen.contains(&owner) {
                        seen.push(owner);
                        votes.push(sign_timeout_vote(ESCROW, id, reason, slot, self.key(slot)));
                    }
                }
                Tx::TimeoutInference(MsgTimeoutInference {
                    inference_id: id,
                    reason: reason as i32,
                    votes,
                })
            }
            Op::Validate { pick, slot, valid } => {
                let id = self.pick(&[Finished, Challenged, Validated, Invalidated], *pick)?;
                let m = MsgValidation {
                    inference_id: id,
                    validator_slot: *slot,
                    valid: *valid,
                    proposer_sig: Vec::new(),
                    escrow_id: ESCROW.into(),
                };
                Tx::Validation(sign_validation(m, self.key(*slot)))
            }
            Op::Votes {
                pick,
                voters,
                valid,
            } => {
                let id = self.pick(&[Challenged], *pick)?;
                let votes = (0..OWNERS.len() as u32)
                    .filter(|s| voters & (1 << s) != 0)
                    .map(|s| {
                        let m = MsgValidationVote {
                            inference_id: id,
                            voter_slot: s,
                            vote_valid: valid & (1 << s) != 0,
                            proposer_sig: Vec::new(),
                            escrow_id: ESCROW.into(),
                        };
                        DevshardTx::new(Tx::ValidationVote(sign_validation_vote(m, self.key(s))))
                    });
                return Some(votes.collect());
            }
        };
        Some(vec![DevshardTx::new(t)])
    }

    /// Gateway side: compose (dropping a Start that cannot be afforded, as the gateway would
    /// fail that request) and sign. `None` when even the empty diff cannot pay its fee.
    fn compose(&mut self, ops: &[Op], finalize: bool) -> Option<Diff> {
        let nonce = self.gateway.latest_nonce() + 1;
        let mut txs: Vec<DevshardTx> = Vec::new();
        let mut started = false;
        for op in ops {
            if matches!(op, Op::Start { .. }) && (started || self.gateway.phase() != Phase::Active)
            {
                continue;
            }
            if let Some(built) = self.build(nonce, op) {
                started |= matches!(op, Op::Start { .. });
                txs.extend(built);
            }
        }
        if finalize {
            txs.push(DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {})));
        }
        let be = match self.gateway.apply_best_effort(nonce, txs.clone()) {
            Ok(be) => be,
            Err(StateError::InsufficientBalance) if started => {
                let rest = txs
                    .into_iter()
                    .filter(|t| !matches!(t.tx, Some(Tx::StartInference(_))));
                self.gateway.apply_best_effort(nonce, rest.collect()).ok()?
            }
            Err(StateError::InsufficientBalance) => return None,
            Err(e) => panic!("unexpected composition error: {e}"),
        };
        for (tx, _) in &be.skipped {
            assert!(!matches!(tx.tx, Some(Tx::StartInference(_))));
        }
        Some(Diff::sign(
            nonce,
            be.applied,
            ESCROW,
            be.root,
            &self.creator,
        ))
    }
}

/// Everything the root commits to, read through the public API.
fn visible(sm: &StateMachine) -> String {
    let stats: Vec<_> = (0..OWNERS.len() as u32).map(|s| sm.host_stats(s)).collect();
    let records: Vec<_> = sm.records().cloned().collect();
    format!(
        "{} {} {:?} {:?} {:?} {:?}",
        sm.balance(),
        sm.fees(),
        sm.phase(),
        sm.sealed_acc(),
        stats,
        records
    )
}

/// A tampered copy of `diff` with one bit flipped in the wire txs bytes, the nonce or the root.
/// `None` when the flip does not decode or decodes to the very same content.
fn flip(diff: &Diff, region: u8, bit: usize) -> Option<Diff> {
    let mut d = diff.clone();
    match region % 3 {
        0 => {
            let mut bytes = diff.wire_txs();
            let i = bit % (bytes.len() * 8);
            bytes[i / 8] ^= 1 << (i % 8);
            let content = DiffContent::decode(bytes.as_slice()).ok()?;
            d.nonce = content.nonce;
            d.txs = content.txs;
        }
        1 => d.nonce ^= 1 << (bit % 64),
        _ => {
            let i = bit % 256;
            d.post_state_root[i / 8] ^= 1 << (i % 8);
        }
    }
    (d.signed_content(ESCROW) != diff.signed_content(ESCROW)).then_some(d)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn gateway_and_host_agree_and_reject_tampering(
        amount in prop_oneof![Just(60_000u64), Just(2_000_000u64)],
        steps in prop::collection::vec(prop::collection::vec(op(), 0..4), 1..36),
        finalize_at in prop::option::of(5usize..40),
        flips in prop::collection::vec((any::<u8>(), any::<usize>()), 36),
    ) {
        let mut w = World::new(amount);
        let creator = w.creator.address().clone();
        let mut prev_root = w.host.state_root();
        let mut prev_visible = visible(&w.host);
        for (i, ops) in steps.iter().enumerate() {
            let Some(diff) = w.compose(ops, finalize_at == Some(i)) else { break };
            // Tampering: any changed content is rejected and leaves the host untouched.
            let (region, bit) = flips[i];
            if let Some(bad) = flip(&diff, region, bit) {
                let before = w.host.clone();
                prop_assert!(w.host.apply_diff(&bad, &creator).is_err());
                prop_assert_eq!(&w.host, &before);
            }
            // A correctly signed diff with a wrong root is a post-state-root mismatch.
            let mut wrong = diff.post_state_root.clone();
            wrong[bit % 32] ^= 0x80;
            let resigned = Diff::sign(diff.nonce, diff.txs.clone(), ESCROW,
                wrong.try_into().unwrap(), &w.creator);
            let err = w.host.apply_diff(&resigned, &creator).unwrap_err();
            prop_assert!(err.is_post_state_root_mismatch(), "{}", err);
            // The genuine diff applies and both sides agree.
            w.host.apply_diff(&diff, &creator).unwrap();
            prop_assert_eq!(w.host.state_root(), w.gateway.state_root());
            prop_assert_eq!(&w.host, &w.gateway);
            // The root moves exactly when committed state moves.
            let now_visible = visible(&w.host);
            prop_assert_eq!(now_visible != prev_visible, w.host.state_root() != prev_root);
            prev_root = w.host.state_root();
            prev_visible = now_visible;
        }
    }
}

fn hex_of(v: &serde_json::Value, path: &[&str]) -> Vec<u8> {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    hex::decode(cur.as_str().unwrap()).unwrap()
}

/// The known-answer vectors (independently generated) drive a real session: the vector receipt
/// and finish signatures are accepted, and the signed contents match byte for byte.
#[test]
fn vectors_drive_a_session() {
    let v: serde_json::Value =
        serde_json::from_str(include_str!("data/devshard-vectors.json")).unwrap();
    let key = |name: &str| {
        SigningKey::from_bytes(&hex_of(&v, &["keys", name, "private_key_hex"])).unwrap()
    };
    let (gateway, host_a, host_b) = (key("gateway"), key("host_a"), key("host_b"));
    let group = vec![
        Slot {
            slot_id: 0,
            validator: host_b.address().clone(),
        },
        Slot {
            slot_id: 1,
            validator: host_a.address().clone(),
        },
    ];
    let cfg = SessionConfig::default_for_group(2);
    let mut gw = StateMachine::new(ESCROW, cfg.clone(), group.clone(), 1_000_000).unwrap();
    let mut host = StateMachine::new(ESCROW, cfg, group, 1_000_000).unwrap();
    let mut send = |txs: Vec<DevshardTx>| {
        let nonce = gw.latest_nonce() + 1;
        let be = gw.apply_best_effort(nonce, txs).unwrap();
        assert!(be.skipped.is_empty(), "{:?}", be.skipped);
        let diff = Diff::sign(nonce, be.applied, ESCROW, be.root, &gateway);
        host.apply_diff(&diff, gateway.address()).unwrap();
        assert_eq!(host, gw);
        host.clone()
    };

    let start = MsgStartInference {
        inference_id: 1,
        prompt_hash: hex_of(&v, &["start", "fields", "prompt_hash_hex"]),
        model: "m".into(),
        input_length: 45,
        max_tokens: 64,
        started_at: T0,
    };
    assert_eq!(
        proto::encode(&start),
        hex_of(&v, &["start", "msg_start_inference_proto_hex"])
    );
    send(vec![DevshardTx::new(Tx::StartInference(start.clone()))]);

    let receipt = receipt_content(&start, ESCROW, T0 + 5);
    assert_eq!(
        proto::encode(&receipt),
        hex_of(&v, &["receipt", "executor_receipt_content_proto_hex"])
    );
    let executor_sig = hex_of(&v, &["receipt", "signature", "signature_hex"]);
    assert_eq!(
        sign_receipt(&start, ESCROW, T0 + 5, &host_a).to_vec(),
        executor_sig
    );
    let confirm = MsgConfirmStart {
        inference_id: 1,
        executor_sig,
        confirmed_at: T0 + 5,
    };
    send(vec![DevshardTx::new(Tx::ConfirmStart(confirm))]);

    let finish = MsgFinishInference {
        inference_id: 1,
        response_hash: hex_of(&v, &["finish", "fields", "response_hash_hex"]),
        input_tokens: 10,
        output_tokens: 5,
        executor_slot: 1,
        proposer_sig: hex_of(&v, &["finish", "proposer_sig", "signature_hex"]),
        escrow_id: ESCROW.into(),
    };
    assert_eq!(
        finish_unsigned_bytes(&finish),
        hex_of(&v, &["finish", "unsigned_proto_hex"])
    );
    assert_eq!(
        proto::encode(&finish),
        hex_of(&v, &["finish", "signed_proto_hex"])
    );
    let resigned = sign_finish(
        MsgFinishInference {
            proposer_sig: vec![],
            ..finish.clone()
        },
        &host_a,
    );
    assert_eq!(resigned, finish);
    let after = send(vec![DevshardTx::new(Tx::FinishInference(finish))]);
    let r = after.record(1).unwrap();
    assert_eq!((r.status, r.actual_cost), (InferenceStatus::Finished, 15));
    assert_eq!(after.host_stats(1).cost, 15);

    let vote = timeout_vote_content(ESCROW, 1, TimeoutReason::Execution);
    assert_eq!(
        vote,
        hex_of(&v, &["timeout_vote", "timeout_vote_content_proto_hex"])
    );
    let vote_sig = hex_of(&v, &["timeout_vote", "signature", "signature_hex"]);
    assert_eq!(
        recover_address(&vote, &vote_sig).unwrap(),
        *host_b.address()
    );
    assert_eq!(
        sign_timeout_vote(ESCROW, 1, TimeoutReason::Execution, 0, &host_b).signature,
        vote_sig
    );

    let state = state_sig_content(&[0xab; 32], ESCROW, 1);
    assert_eq!(
        state,
        hex_of(&v, &["state_sig", "state_signature_content_proto_hex"])
    );
}
