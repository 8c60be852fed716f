//! End-of-nonce processing (docs/protocol.md §5.3): the per-nonce fee, the Finalizing → Settlement
//! transition with its drain, and the deterministic auto-seal.
//!
//! Order after the txs of diff `nonce` (as upstream `applyCore`):
//! 1. while Active: `balance -= fee_per_nonce; fees += fee_per_nonce` (`ErrInsufficientBalance`);
//!    the diff that carries MsgFinalizeRound is already Finalizing and pays no fee;
//! 2. `latest_nonce = nonce`;
//! 3. Finalizing and `latest >= finalize_nonce + N` → Settlement; from v4.1 on the live records
//!    are first drained (ascending id: Started → `actual_cost = reserved`, Finished, executor
//!    `cost += reserved`; Pending → reservation refunded, TimedOut, no `missed`; docs/versions.md),
//!    then every live record is folded into `sealed_acc` (ascending id, seal nonce = `latest`);
//! 4. still Active and `nonce % auto_seal_interval == 0` → auto-seal.
//!
//! Auto-seal: `state_clock` = max `confirmed_at > 0` over the newest `3N` live records (by id).
//! When no record in that window is confirmed the clock is unknown and nothing seals (upstream
//! behaviour). Otherwise a live record seals when its status is Finished, Validated, Invalidated
//! or TimedOut, `nonce >= id + inference_seal_grace_nonces`, and — for Finished only —
//! `state_clock - confirmed_at >= inference_seal_grace_seconds`. Sealed records are folded in
//! ascending id order with `sealed_acc' = sha256(acc ‖ nonce_be8 ‖ id_be8 ‖ entry)` and removed.

use super::{root::fold_sealed, InferenceStatus, Phase, StateError, StateMachine};

/// The state clock scans the newest `STATE_CLOCK_WINDOW_FACTOR * N` live records.
pub const STATE_CLOCK_WINDOW_FACTOR: usize = 3;

impl StateMachine {
    /// Fee, nonce advance, phase transition and auto-seal for diff `nonce` (after its txs).
    pub(super) fn close_nonce(&mut self, nonce: u64) -> Result<(), StateError> {
        if self.st.phase == Phase::Active {
            let fee = self.session.config.fee_per_nonce;
            let balance = self
                .st
                .balance
                .checked_sub(fee)
                .ok_or(StateError::InsufficientBalance)?;
            let fees = self
                .st
                .fees
                .checked_add(fee)
                .ok_or(StateError::Overflow("fees"))?;
            self.st.balance = balance;
            self.st.fees = fees;
        }
        self.st.latest_nonce = nonce;
        if self.st.phase == Phase::Finalizing {
            let n = self.group_size() as u64;
            if self.st.latest_nonce >= self.st.finalize_nonce.saturating_add(n) {
                self.st.phase = Phase::Settlement;
                if self.session.config.protocol.drains_at_settlement() {
                    self.drain_for_settlement()?;
                }
                let all: Vec<u64> = self.st.records.iter().map(|r| r.inference_id).collect();
                self.seal(nonce, &all);
            }
        }
        if self.st.phase == Phase::Active
            && nonce.is_multiple_of(self.session.config.auto_seal_interval())
        {
            let ids = self.auto_seal_candidates(nonce);
            self.seal(nonce, &ids);
        }
        Ok(())
    }

    /// The deterministic "now": max `confirmed_at > 0` over the newest `3N` live records, or
    /// `None` when none of them is confirmed.
    pub fn state_clock(&self) -> Option<i64> {
        let window = self.group_size().saturating_mul(STATE_CLOCK_WINDOW_FACTOR);
        self.st
            .records
            .iter()
            .rev()
            .take(window)
            .map(|r| r.confirmed_at)
            .filter(|c| *c > 0)
            .max()
    }

    /// Live ids (ascending) that pass both seal gates at `seal_nonce`.
    fn auto_seal_candidates(&self, seal_nonce: u64) -> Vec<u64> {
        let Some(clock) = self.state_clock() else {
            return Vec::new();
        };
        let grace_nonces = u64::from(self.session.config.inference_seal_grace_nonces);
        let grace_secs = i64::from(self.session.config.inference_seal_grace_seconds);
        self.st
            .records
            .iter()
            .filter(|r| {
                let nonce_gate = r
                    .inference_id
                    .checked_add(grace_nonces)
                    .is_some_and(|g| seal_nonce >= g);
                let status_gate = match r.status {
                    InferenceStatus::Finished => clock.saturating_sub(r.confirmed_at) >= grace_secs,
                    InferenceStatus::Validated
                    | InferenceStatus::Invalidated
                    | InferenceStatus::TimedOut => true,
                    InferenceStatus::Pending
                    | InferenceStatus::Started
                    | InferenceStatus::Challenged => false,
                };
                nonce_gate && status_gate
            })
            .map(|r| r.inference_id)
            .collect()
    }

    /// The v4.1 settlement drain: every record still Started is paid its reservation, every
    /// record still Pending is refunded; nothing else changes.
    fn drain_for_settlement(&mut self) -> Result<(), StateError> {
        let live: Vec<_> = self
            .st
            .records
            .iter()
            .filter(|r| {
                matches!(
                    r.status,
                    InferenceStatus::Started | InferenceStatus::Pending
                )
            })
            .cloned()
            .collect();
        for mut rec in live {
            if rec.status == InferenceStatus::Started {
                let idx = self.stats_index(rec.executor_slot)?;
                let mut stats = self.host_stats(rec.executor_slot);
                stats.cost = stats
                    .cost
                    .checked_add(rec.reserved_cost)
                    .ok_or(StateError::Overflow("host cost"))?;
                rec.actual_cost = rec.reserved_cost;
                rec.status = InferenceStatus::Finished;
                self.st.host_stats[idx] = stats;
            } else {
                self.st.balance = self
                    .st
                    .balance
                    .checked_add(rec.reserved_cost)
                    .ok_or(StateError::Overflow("balance"))?;
                rec.status = InferenceStatus::TimedOut;
            }
            self.st.records.put(rec);
        }
        Ok(())
    }

    /// Folds the given live records (ascending ids) into `sealed_acc` at `seal_nonce` and
    /// removes them from the live set.
    fn seal(&mut self, seal_nonce: u64, ids: &[u64]) {
        for entry in self.st.records.remove_sorted(ids) {
            let id = entry.record().inference_id;
            self.st.sealed_acc =
                fold_sealed(&self.st.sealed_acc, seal_nonce, id, &entry.entry_bytes());
            self.st.sealed_count = self.st.sealed_count.saturating_add(1);
        }
    }
}
