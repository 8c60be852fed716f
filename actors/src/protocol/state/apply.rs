//! Transaction effects (docs/protocol.md §5.3): Start, ConfirmStart, Finish, RevealSeed and
//! FinalizeRound, plus the per-diff sequencing checks and the dispatch. Timeouts live in
//! `timeout.rs`, Validation and ValidationVote in `validate.rs`.
//!
//! Every `apply_*` is check-first-commit-last: signatures, statuses and all checked arithmetic
//! are evaluated into locals, and only then is the ledger written (infallibly). A failing tx
//! therefore never leaves a partial effect, which best-effort composition relies on.

use crate::protocol::{
    crypto::Address,
    proto::{self, DevshardTx, MsgConfirmStart, MsgFinishInference, MsgStartInference, Tx},
};

use super::{
    content::{finish_unsigned_bytes, record_receipt_content},
    warm::SigKind,
    InferenceRecord, InferenceStatus, Phase, ShortBytes, StateError, StateMachine,
};

/// `(a + b) * price` with overflow checks (`ErrCostOverflow`).
pub(super) fn token_cost(a: u64, b: u64, price: u64) -> Result<u64, StateError> {
    a.checked_add(b)
        .and_then(|s| s.checked_mul(price))
        .ok_or(StateError::CostOverflow)
}

impl StateMachine {
    /// Checks that apply to the diff as a whole, before any tx: `nonce == latest + 1`, at most
    /// one MsgStartInference and its id equals the nonce.
    pub(super) fn check_sequence(&self, nonce: u64, txs: &[DevshardTx]) -> Result<(), StateError> {
        let expected = self
            .st
            .latest_nonce
            .checked_add(1)
            .ok_or(StateError::Overflow("latest nonce"))?;
        if nonce != expected {
            return Err(StateError::InvalidNonce {
                expected,
                got: nonce,
            });
        }
        let mut starts = 0usize;
        for tx in txs {
            if let Some(Tx::StartInference(start)) = &tx.tx {
                starts += 1;
                if start.inference_id != nonce {
                    return Err(StateError::InvalidInferenceID);
                }
            }
        }
        if starts > 1 {
            return Err(StateError::MultipleStartMsgs);
        }
        Ok(())
    }

    /// Applies one transaction of diff `nonce`.
    pub(super) fn apply_tx(&mut self, nonce: u64, tx: &DevshardTx) -> Result<(), StateError> {
        match &tx.tx {
            Some(Tx::StartInference(m)) => self.apply_start(nonce, m),
            Some(Tx::ConfirmStart(m)) => self.apply_confirm_start(m),
            Some(Tx::FinishInference(m)) => self.apply_finish(m),
            Some(Tx::TimeoutInference(m)) => self.apply_timeout(m),
            Some(Tx::Validation(m)) => self.apply_validation(m),
            Some(Tx::ValidationVote(m)) => self.apply_validation_vote(m),
            // Deprecated upstream: accepted and ignored.
            Some(Tx::RevealSeed(_)) => Ok(()),
            Some(Tx::FinalizeRound(_)) => self.apply_finalize_round(nonce),
            None => Err(StateError::EmptyTx),
        }
    }

    /// A live record, or `ErrInferenceNotFound` (unknown or already sealed).
    pub(super) fn live(&self, id: u64) -> Result<&InferenceRecord, StateError> {
        self.st
            .records
            .get(&id)
            .ok_or(StateError::InferenceNotFound(id))
    }

    /// The owner of a group slot, or `ErrSlotNotInGroup`.
    pub(super) fn slot_owner(&self, slot: u32) -> Result<&Address, StateError> {
        self.slot_address(slot)
            .ok_or(StateError::SlotNotInGroup(slot))
    }

    /// Bitmap of every slot held by `addr`.
    pub(super) fn slot_mask(&self, addr: &Address) -> u128 {
        self.session
            .group
            .iter()
            .filter(|s| &s.validator == addr && s.slot_id < 128)
            .fold(0u128, |m, s| m | (1u128 << s.slot_id))
    }

    /// Index of `slot` into `host_stats` (slot ids are exactly `0..N-1`).
    pub(super) fn stats_index(&self, slot: u32) -> Result<usize, StateError> {
        usize::try_from(slot)
            .ok()
            .filter(|i| *i < self.st.host_stats.len())
            .ok_or(StateError::SlotNotInGroup(slot))
    }

    fn apply_start(&mut self, nonce: u64, m: &MsgStartInference) -> Result<(), StateError> {
        if self.st.phase != Phase::Active {
            return Err(StateError::SessionFinalizing);
        }
        if m.inference_id != nonce {
            return Err(StateError::InvalidInferenceID);
        }
        if self.st.records.contains_key(&m.inference_id) {
            return Err(StateError::DuplicateInferenceID);
        }
        let executor_slot = self.executor_slot(m.inference_id).slot_id;
        let reserved = token_cost(
            m.input_length,
            m.max_tokens,
            self.session.config.token_price,
        )?;
        let balance = self
            .st
            .balance
            .checked_sub(reserved)
            .ok_or(StateError::InsufficientBalance)?;
        let rec = InferenceRecord {
            inference_id: m.inference_id,
            status: InferenceStatus::Pending,
            executor_slot,
            model: self.st.records.shared_model(&m.model),
            prompt_hash: ShortBytes::new(&m.prompt_hash),
            response_hash: ShortBytes::default(),
            input_length: m.input_length,
            max_tokens: m.max_tokens,
            input_tokens: 0,
            output_tokens: 0,
            reserved_cost: reserved,
            actual_cost: 0,
            started_at: m.started_at,
            confirmed_at: 0,
            votes_valid: 0,
            votes_invalid: 0,
            validated_by: 0,
        };
        self.st.balance = balance;
        self.st.records.put(rec);
        Ok(())
    }

    fn apply_confirm_start(&mut self, m: &MsgConfirmStart) -> Result<(), StateError> {
        let rec = self.live(m.inference_id)?;
        if rec.status != InferenceStatus::Pending {
            return Err(StateError::InvalidTransition(format!(
                "inference {}: expected pending, got {}",
                m.inference_id, rec.status
            )));
        }
        let content = record_receipt_content(rec, self.escrow_id(), m.confirmed_at);
        let bind = self.admit(
            SigKind::Executor,
            rec.executor_slot,
            &proto::encode(&content),
            &m.executor_sig,
        )?;
        let mut rec = rec.clone();
        rec.status = InferenceStatus::Started;
        rec.confirmed_at = m.confirmed_at;
        self.st.records.put(rec);
        self.bind_warm(bind);
        Ok(())
    }

    fn apply_finish(&mut self, m: &MsgFinishInference) -> Result<(), StateError> {
        let rec = self.live(m.inference_id)?;
        if rec.status != InferenceStatus::Started {
            return Err(StateError::InvalidTransition(format!(
                "inference {}: expected started, got {}",
                m.inference_id, rec.status
            )));
        }
        if m.executor_slot != rec.executor_slot {
            return Err(StateError::WrongExecutorSlot {
                expected: rec.executor_slot,
                got: m.executor_slot,
            });
        }
        let bind = self.admit(
            SigKind::Proposer,
            rec.executor_slot,
            &finish_unsigned_bytes(m),
            &m.proposer_sig,
        )?;
        self.check_escrow(&m.escrow_id)?;
        let cost = token_cost(
            m.input_tokens,
            m.output_tokens,
            self.session.config.token_price,
        )?;
        let actual = cost.min(rec.reserved_cost);
        let surplus = rec.reserved_cost - actual;
        let balance = self
            .st
            .balance
            .checked_add(surplus)
            .ok_or(StateError::Overflow("balance"))?;
        let idx = self.stats_index(rec.executor_slot)?;
        let mut stats = self.host_stats(rec.executor_slot);
        stats.cost = stats
            .cost
            .checked_add(actual)
            .ok_or(StateError::Overflow("host cost"))?;
        let mut rec = rec.clone();
        rec.status = InferenceStatus::Finished;
        rec.response_hash = ShortBytes::new(&m.response_hash);
        rec.input_tokens = m.input_tokens;
        rec.output_tokens = m.output_tokens;
        rec.actual_cost = actual;
        self.st.balance = balance;
        self.st.host_stats[idx] = stats;
        self.st.records.put(rec);
        self.bind_warm(bind);
        Ok(())
    }

    fn apply_finalize_round(&mut self, nonce: u64) -> Result<(), StateError> {
        if self.st.phase != Phase::Active {
            return Err(StateError::AlreadyFinalizing);
        }
        self.st.phase = Phase::Finalizing;
        self.st.finalize_nonce = nonce;
        Ok(())
    }

    /// Cross-session replay protection for host-proposed txs.
    pub(super) fn check_escrow(&self, got: &str) -> Result<(), StateError> {
        if got != self.escrow_id() {
            return Err(StateError::EscrowIDMismatch {
                expected: self.escrow_id().to_string(),
                got: got.to_string(),
            });
        }
        Ok(())
    }
}
