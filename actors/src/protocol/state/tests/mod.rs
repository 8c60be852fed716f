//! Unit tests of the state machine with real secp256k1 signatures. `Fx` plays every party: the
//! gateway (creator key, best-effort composition + `Diff::sign`) and the hosts (slot keys).

mod compose;
mod drain;
mod finalize;
mod lifecycle;
mod live_set;
mod root_cache;
mod timeout;
mod validation;
mod warm;

use crate::protocol::{
    crypto::SigningKey,
    diff::Diff,
    proto::{
        DevshardTx, MsgConfirmStart, MsgFinishInference, MsgStartInference, MsgTimeoutInference,
        MsgValidation, MsgValidationVote, TimeoutReason, TimeoutVote, Tx,
    },
};

use super::{
    sign_finish, sign_receipt, sign_timeout_vote, sign_validation, sign_validation_vote,
    SessionConfig, Slot, StateError, StateMachine,
};

pub(super) const ESCROW: &str = "42";
pub(super) const AMOUNT: u64 = 1_000_000;
pub(super) const T0: i64 = 1_700_000_000;

/// A session plus every key involved in it.
pub(super) struct Fx {
    pub sm: StateMachine,
    pub creator: SigningKey,
    /// `owners[slot]` = index into `hosts`.
    pub owners: Vec<usize>,
    pub hosts: Vec<SigningKey>,
}

pub(super) fn tx(t: Tx) -> DevshardTx {
    DevshardTx::new(t)
}

impl Fx {
    /// Slot `i` is held by host `owners[i]`; default config for the group size.
    pub fn new(owners: &[usize]) -> Fx {
        Fx::with_config(owners, SessionConfig::default_for_group(owners.len()))
    }

    pub fn with_config(owners: &[usize], config: SessionConfig) -> Fx {
        let distinct = owners.iter().copied().max().map_or(0, |m| m + 1);
        let hosts: Vec<SigningKey> = (0..distinct)
            .map(|i| SigningKey::derive("host", i as u32))
            .collect();
        let group = owners
            .iter()
            .enumerate()
            .map(|(i, h)| Slot {
                slot_id: i as u32,
                validator: hosts[*h].address().clone(),
            })
            .collect();
        let sm = StateMachine::new(ESCROW, config, group, AMOUNT).unwrap();
        Fx {
            sm,
            creator: SigningKey::derive("creator", 0),
            owners: owners.to_vec(),
            hosts,
        }
    }

    pub fn slot_key(&self, slot: u32) -> &SigningKey {
        &self.hosts[self.owners[slot as usize]]
    }

    pub fn next(&self) -> u64 {
        self.sm.latest_nonce() + 1
    }

    /// Composes like the gateway (best effort on a probe clone), requires that nothing was
    /// skipped, signs, and applies strictly like a host.
    pub fn apply(&mut self, txs: Vec<DevshardTx>) -> Result<(), StateError> {
        let nonce = self.next();
        let mut probe = self.sm.clone();
        let be = probe.apply_best_effort(nonce, txs.clone())?;
        if let Some((_, e)) = be.skipped.first() {
            return Err(e.clone());
        }
        let diff = Diff::sign(nonce, txs, ESCROW, be.root, &self.creator);
        self.sm.apply_diff(&diff, self.creator.address())?;
        assert_eq!(self.sm, probe, "host and gateway disagree");
        Ok(())
    }

    /// `apply` that must succeed.
    pub fn ok(&mut self, txs: Vec<DevshardTx>) {
        self.apply(txs).unwrap();
    }

    /// `apply` that must fail with `want` and leave the state unchanged.
    pub fn rejects(&mut self, txs: Vec<DevshardTx>, want: impl Fn(&StateError) -> bool) {
        let before = self.sm.clone();
        let err = self.apply(txs).unwrap_err();
        assert!(want(&err), "unexpected error: {err}");
        assert_eq!(self.sm, before, "a rejected diff changed the state");
    }

    /// An empty diff (just advances the nonce and charges the fee).
    pub fn tick(&mut self) {
        self.ok(vec![]);
    }

    pub fn start_msg(&self, input_length: u64, max_tokens: u64) -> MsgStartInference {
        MsgStartInference {
            inference_id: self.next(),
            prompt_hash: vec![7; 32],
            model: "m".into(),
            input_length,
            max_tokens,
            started_at: T0,
        }
    }

    /// Starts an inference at the next nonce; returns its id.
    pub fn start(&mut self, input_length: u64, max_tokens: u64) -> u64 {
        let m = self.start_msg(input_length, max_tokens);
        self.ok(vec![tx(Tx::StartInference(m.clone()))]);
        m.inference_id
    }

    /// A ConfirmStart signed by `key` over the record's receipt (a dummy one for unknown ids).
    pub fn confirm_by(&self, id: u64, confirmed_at: i64, key: &SigningKey) -> DevshardTx {
        let start = match self.sm.record(id) {
            Some(r) => MsgStartInference {
                inference_id: id,
                prompt_hash: r.prompt_hash.to_vec(),
                model: r.model.to_string(),
                input_length: r.input_length,
                max_tokens: r.max_tokens,
                started_at: r.started_at,
            },
            None => MsgStartInference {
                inference_id: id,
                ..Default::default()
            },
        };
        let executor_sig = sign_receipt(&start, ESCROW, confirmed_at, key).to_vec();
        tx(Tx::ConfirmStart(MsgConfirmStart {
            inference_id: id,
            executor_sig,
            confirmed_at,
        }))
    }

    pub fn confirm(&self, id: u64, confirmed_at: i64) -> DevshardTx {
        let slot = self.sm.record(id).unwrap().executor_slot;
        self.confirm_by(id, confirmed_at, self.slot_key(slot))
    }

    pub fn finish_msg(&self, id: u64, input_tokens: u64, output_tokens: u64) -> MsgFinishInference {
        MsgFinishInference {
            inference_id: id,
            response_hash: vec![9; 32],
            input_tokens,
            output_tokens,
            executor_slot: self.sm.record(id).unwrap().executor_slot,
            proposer_sig: Vec::new(),
            escrow_id: ESCROW.into(),
        }
    }

    pub fn finish(&self, id: u64, input_tokens: u64, output_tokens: u64) -> DevshardTx {
        let m = self.finish_msg(id, input_tokens, output_tokens);
        let key = self.slot_key(m.executor_slot);
        tx(Tx::FinishInference(sign_finish(m, key)))
    }

    /// Start + confirm + finish; returns the id.
    pub fn finished(&mut self, input_tokens: u64, output_tokens: u64) -> u64 {
        let id = self.start(100, 50);
        self.ok(vec![self.confirm(id, T0 + 1)]);
        self.ok(vec![self.finish(id, input_tokens, output_tokens)]);
        id
    }

    pub fn validation(&self, id: u64, slot: u32, valid: bool) -> DevshardTx {
        let m = MsgValidation {
            inference_id: id,
            validator_slot: slot,
            valid,
            proposer_sig: Vec::new(),
            escrow_id: ESCROW.into(),
        };
        tx(Tx::Validation(sign_validation(m, self.slot_key(slot))))
    }

    pub fn vote(&self, id: u64, slot: u32, vote_valid: bool) -> DevshardTx {
        let m = MsgValidationVote {
            inference_id: id,
            voter_slot: slot,
            vote_valid,
            proposer_sig: Vec::new(),
            escrow_id: ESCROW.into(),
        };
        tx(Tx::ValidationVote(sign_validation_vote(
            m,
            self.slot_key(slot),
        )))
    }

    pub fn timeout_vote(&self, id: u64, reason: TimeoutReason, slot: u32) -> TimeoutVote {
        sign_timeout_vote(ESCROW, id, reason, slot, self.slot_key(slot))
    }

    pub fn timeout(&self, id: u64, reason: TimeoutReason, votes: Vec<TimeoutVote>) -> DevshardTx {
        tx(Tx::TimeoutInference(MsgTimeoutInference {
            inference_id: id,
            reason: reason as i32,
            votes,
        }))
    }
}
