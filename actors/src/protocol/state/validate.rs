//! Validation effects (docs/protocol.md §5.3): MsgValidation from a non-executor host and
//! MsgValidationVote on a challenged inference.
//!
//! Rules (where the protocol text is silent, upstream `state/machine.go` is followed):
//! - **Validation** is accepted on Finished, Challenged, Validated and Invalidated records. The
//!   validator's address must differ from the executor's (`ErrSelfValidation`), the proposer sig
//!   must recover to the validator slot's owner and `escrow_id` must match. It is idempotent per
//!   address: when any slot of that address is already in `validated_by` the tx is a no-op that
//!   succeeds (checked before the status gate, as upstream, so re-sent validations never stall a
//!   mempool). Otherwise only the emitting slot's bit is set in `validated_by`. On a Finished
//!   record the validator address's slot weight is added to `votes_valid`/`votes_invalid`, and
//!   `valid = false` moves it to Challenged. On later statuses only the bit changes. A
//!   validation changes **only the inference record**: `host_stats` (`required_validations`,
//!   `completed_validations`) is never touched, in every upstream version (docs/versions.md;
//!   upstream's v4.1 known-answer roots diverge from nonce 7 otherwise).
//! - **ValidationVote** is a no-op on Validated/Invalidated records (safe batching, as upstream)
//!   and otherwise requires Challenged. One participation per address: an address already in
//!   `validated_by` (as validator or voter) gets `ErrDuplicateVote`. The executor's address may
//!   not vote (`ErrSelfValidation`). The vote adds the voter's slot weight; invalid weight
//!   `> vote_threshold` → Invalidated (actual cost refunded to the balance and removed from the
//!   executor's earned cost, `invalid++`); else valid weight `> vote_threshold` → Validated.

use crate::protocol::proto::{MsgValidation, MsgValidationVote};

use super::{
    content::{validation_unsigned_bytes, validation_vote_unsigned_bytes},
    warm::SigKind,
    InferenceStatus, StateError, StateMachine,
};

impl StateMachine {
    pub(super) fn apply_validation(&mut self, m: &MsgValidation) -> Result<(), StateError> {
        let rec = self.live(m.inference_id)?;
        let validator = self.slot_owner(m.validator_slot)?;
        let executor = self.slot_owner(rec.executor_slot)?;
        if validator == executor {
            return Err(StateError::SelfValidation);
        }
        let mask = self.slot_mask(validator);
        if rec.validated_by & mask != 0 {
            return Ok(());
        }
        match rec.status {
            InferenceStatus::Finished
            | InferenceStatus::Challenged
            | InferenceStatus::Validated
            | InferenceStatus::Invalidated => {}
            other => {
                return Err(StateError::InvalidTransition(format!(
                    "inference {}: expected finished or later, got {other}",
                    m.inference_id
                )))
            }
        }
        let bind = self.admit(
            SigKind::Proposer,
            m.validator_slot,
            &validation_unsigned_bytes(m),
            &m.proposer_sig,
        )?;
        self.check_escrow(&m.escrow_id)?;
        let weight = self.weight_of(validator);
        let emitting_bit = 1u128
            .checked_shl(m.validator_slot)
            .ok_or(StateError::SlotNotInGroup(m.validator_slot))?;
        let mut rec = rec.clone();
        rec.validated_by |= emitting_bit;
        if rec.status == InferenceStatus::Finished {
            if m.valid {
                rec.votes_valid = rec
                    .votes_valid
                    .checked_add(weight)
                    .ok_or(StateError::Overflow("votes"))?;
            } else {
                rec.votes_invalid = rec
                    .votes_invalid
                    .checked_add(weight)
                    .ok_or(StateError::Overflow("votes"))?;
                rec.status = InferenceStatus::Challenged;
            }
        }
        self.st.records.put(rec);
        self.bind_warm(bind);
        Ok(())
    }

    pub(super) fn apply_validation_vote(
        &mut self,
        m: &MsgValidationVote,
    ) -> Result<(), StateError> {
        let rec = self.live(m.inference_id)?;
        let voter = self.slot_owner(m.voter_slot)?;
        match rec.status {
            InferenceStatus::Validated | InferenceStatus::Invalidated => return Ok(()),
            InferenceStatus::Challenged => {}
            other => {
                return Err(StateError::InvalidTransition(format!(
                    "inference {}: expected challenged, got {other}",
                    m.inference_id
                )))
            }
        }
        let executor = self.slot_owner(rec.executor_slot)?;
        if voter == executor {
            return Err(StateError::SelfValidation);
        }
        let mask = self.slot_mask(voter);
        if rec.validated_by & mask != 0 {
            return Err(StateError::DuplicateVote(format!(
                "{} (address {voter} already participated)",
                m.voter_slot
            )));
        }
        let bind = self.admit(
            SigKind::Proposer,
            m.voter_slot,
            &validation_vote_unsigned_bytes(m),
            &m.proposer_sig,
        )?;
        self.check_escrow(&m.escrow_id)?;
        let weight = self.weight_of(voter);
        let mut rec = rec.clone();
        rec.validated_by |= mask;
        if m.vote_valid {
            rec.votes_valid = rec
                .votes_valid
                .checked_add(weight)
                .ok_or(StateError::Overflow("votes"))?;
        } else {
            rec.votes_invalid = rec
                .votes_invalid
                .checked_add(weight)
                .ok_or(StateError::Overflow("votes"))?;
        }
        let threshold = self.session.config.vote_threshold;
        let mut balance = self.st.balance;
        let idx = self.stats_index(rec.executor_slot)?;
        let mut stats = self.host_stats(rec.executor_slot);
        if rec.votes_invalid > threshold {
            rec.status = InferenceStatus::Invalidated;
            balance = balance
                .checked_add(rec.actual_cost)
                .ok_or(StateError::Overflow("balance"))?;
            stats.invalid = stats
                .invalid
                .checked_add(1)
                .ok_or(StateError::Overflow("invalid"))?;
            stats.cost = stats.cost.saturating_sub(rec.actual_cost);
        } else if rec.votes_valid > threshold {
            rec.status = InferenceStatus::Validated;
        }
        self.st.balance = balance;
        self.st.host_stats[idx] = stats;
        self.st.records.put(rec);
        self.bind_warm(bind);
        Ok(())
    }
}
