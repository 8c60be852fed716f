//! MsgTimeoutInference (PROTOCOL.md §5.3): REFUSED requires Pending, EXECUTION requires Started.
//!
//! Votes are deduplicated by address (a second vote from the same address, via any of its
//! slots, is `ErrDuplicateVote`). Each vote's signature must recover, over
//! `TimeoutVoteContent{escrow_id, inference_id, reason, accept}` with the vote's own `accept`
//! flag, to the owner of `voter_slot`; the executor's address may not vote
//! (`ErrInvalidVoteSig`). The accept weight (slot count of each accepting address) must be
//! strictly greater than `vote_threshold`. Effect: TimedOut, `missed++` for the executor slot and
//! the whole reserve returned to the balance.

use std::collections::BTreeSet;

use crate::protocol::{
    crypto::Address,
    proto::{MsgTimeoutInference, TimeoutReason},
};

use super::{
    content::timeout_vote_content_with, warm::SigKind, InferenceStatus, StateError, StateMachine,
};

impl StateMachine {
    pub(super) fn apply_timeout(&mut self, m: &MsgTimeoutInference) -> Result<(), StateError> {
        let rec = self.live(m.inference_id)?;
        let required = match TimeoutReason::try_from(m.reason) {
            Ok(TimeoutReason::Refused) => InferenceStatus::Pending,
            Ok(TimeoutReason::Execution) => InferenceStatus::Started,
            _ => return Err(StateError::InvalidTimeoutReason(m.reason)),
        };
        if rec.status != required {
            return Err(StateError::InvalidTransition(format!(
                "inference {}: timeout requires {required}, got {}",
                m.inference_id, rec.status
            )));
        }
        let executor = self.slot_owner(rec.executor_slot)?;
        let mut seen: BTreeSet<&Address> = BTreeSet::new();
        let mut accept: u32 = 0;
        let mut binds = Vec::new();
        for vote in &m.votes {
            let voter = self.slot_owner(vote.voter_slot)?;
            if !seen.insert(voter) {
                return Err(StateError::DuplicateVote(format!(
                    "{} (address {voter} already voted)",
                    vote.voter_slot
                )));
            }
            if voter == executor {
                return Err(StateError::InvalidVoteSig(format!(
                    "vote from slot {}: the executor cannot vote on its own timeout",
                    vote.voter_slot
                )));
            }
            let content =
                timeout_vote_content_with(self.escrow_id(), m.inference_id, m.reason, vote.accept);
            let bind = self
                .admit(SigKind::Vote, vote.voter_slot, &content, &vote.signature)
                .map_err(|e| match e {
                    StateError::InvalidVoteSig(text) => StateError::InvalidVoteSig(format!(
                        "vote from slot {}: {text}",
                        vote.voter_slot
                    )),
                    other => other,
                })?;
            binds.extend(bind);
            if vote.accept {
                accept = accept.saturating_add(self.weight_of(voter));
            }
        }
        let threshold = self.session.config.vote_threshold;
        if accept <= threshold {
            return Err(StateError::InsufficientVotes {
                threshold,
                got: accept,
            });
        }
        let balance = self
            .st
            .balance
            .checked_add(rec.reserved_cost)
            .ok_or(StateError::Overflow("balance"))?;
        let idx = self.stats_index(rec.executor_slot)?;
        let mut stats = self.host_stats(rec.executor_slot);
        stats.missed = stats
            .missed
            .checked_add(1)
            .ok_or(StateError::Overflow("missed"))?;
        let mut rec = rec.clone();
        rec.status = InferenceStatus::TimedOut;
        self.st.balance = balance;
        self.st.host_stats[idx] = stats;
        self.st.records.put(rec);
        self.bind_warm(binds);
        Ok(())
    }
}
