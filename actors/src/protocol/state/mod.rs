//! The deterministic devshard state machine (docs/protocol.md §4.2–§5.4), shared by the gateway and
//! the host simulator so both compute the same roots from the same diffs.
//!
//! # Layout
//! - `config.rs`  — [`SessionConfig`] (frozen at bind).
//! - `record.rs`  — [`Slot`], [`Phase`], [`InferenceStatus`], [`InferenceRecord`], [`HostStats`].
//! - `error.rs`   — [`StateError`] with the upstream error texts.
//! - `apply.rs`, `timeout.rs`, `validate.rs` — the effect of each transaction kind.
//! - `seal.rs`    — per-nonce fee, phase transitions, auto-seal and the settlement drain.
//! - `root.rs`    — the state root, tagged with the escrow's protocol version.
//! - `records.rs` — the live record map with cached encodings and incremental live hash.
//! - `content.rs` — the signed byte strings (receipts, proposer sigs, votes, state sigs).
//! - `short_bytes.rs` — [`ShortBytes`], a record hash held inline.
//! - `snapshot.rs` — [`StateSnapshot`], a serializable copy for persistence.
//!
//! # Atomicity
//! Every apply works on a clone and commits by swapping it in, so a failing diff (or an aborted
//! best-effort composition) leaves the machine untouched. The clone is shallow: the live records
//! are copy-on-write chunks (`records.rs`), so a clone copies one pointer per 64 records and an
//! apply copies only the chunks it writes. Within a best-effort composition each
//! transaction is additionally check-first-commit-last: all validation and arithmetic happens on
//! local copies before anything is written, so a skipped transaction leaves no trace.

mod apply;
mod config;
mod content;
mod error;
mod record;
mod records;
mod root;
mod seal;
mod short_bytes;
mod snapshot;
#[cfg(test)]
mod tests;
mod timeout;
mod validate;
mod warm;

use std::{collections::BTreeMap, sync::Arc};

use crate::protocol::{
    crypto::Address,
    diff::Diff,
    proto::{self, DevshardTx},
    warm::WarmBinding,
};

pub use config::*;
pub use content::{
    finish_unsigned_bytes, receipt_content, sign_finish, sign_receipt, sign_state,
    sign_timeout_vote, sign_validation, sign_validation_vote, state_sig_content,
    timeout_vote_content, timeout_vote_content_with, validation_unsigned_bytes,
    validation_vote_unsigned_bytes,
};
pub use error::StateError;
pub use record::{HostStats, InferenceRecord, InferenceStatus, Phase, Slot};
use records::Records;
pub use root::{compose_root, fold_sealed};
pub use seal::STATE_CLOCK_WINDOW_FACTOR;
pub use short_bytes::ShortBytes;
pub use snapshot::StateSnapshot;

/// Largest group a session may have (`validated_by` is a 128-bit slot bitmap).
pub const MAX_GROUP_SIZE: usize = 128;

/// The immutable part of a session, shared between clones.
#[derive(Debug, PartialEq, Eq)]
struct Session {
    escrow_id: String,
    config: SessionConfig,
    /// Validated: `group[i].slot_id == i`, `1..=128` slots.
    group: Vec<Slot>,
}

/// The mutable part of a session: everything the state root commits to, plus bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ledger {
    balance: u64,
    fees: u64,
    phase: Phase,
    /// Nonce of the diff that carried MsgFinalizeRound (0 while Active).
    finalize_nonce: u64,
    latest_nonce: u64,
    /// Sealed accumulator; all zero until the first seal.
    sealed_acc: [u8; 32],
    /// How many records have been folded into `sealed_acc` (not part of the root).
    sealed_count: u64,
    /// Live records by inference id, with the cached live hash (`records.rs`).
    records: Records,
    /// Indexed by slot id; one entry per group slot.
    host_stats: Vec<HostStats>,
    /// Warm key bound to each slot (`warm.rs`), shared copy-on-write between clones.
    warm_keys: Arc<BTreeMap<u32, Address>>,
}

/// One escrow session's state. Cheap to clone: the group and config are shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateMachine {
    session: Arc<Session>,
    st: Ledger,
    /// Step 4 of the warm-key rule (not state: ignored by equality and snapshots).
    warm: warm::ResolverSlot,
}

/// Outcome of [`StateMachine::apply_best_effort`].
#[derive(Clone, Debug, PartialEq)]
pub struct BestEffort {
    /// The candidates that applied, in order: the txs of the diff to sign.
    pub applied: Vec<DevshardTx>,
    /// Candidates that failed and were left out, with the reason.
    pub skipped: Vec<(DevshardTx, StateError)>,
    /// The post-state root of the new nonce.
    pub root: [u8; 32],
    /// Warm keys this nonce bound (to be stored with the diff).
    pub warm_delta: Vec<WarmBinding>,
}

impl StateMachine {
    /// A fresh session (`ValidateGroup`: slot ids exactly `0..N-1`, `1..=128` slots). The
    /// creation fee is charged at once: `balance = amount - create_devshard_fee` and `fees`
    /// starts at `create_devshard_fee` (as upstream `NewStateMachine`).
    pub fn new(
        escrow_id: impl Into<String>,
        config: SessionConfig,
        group: Vec<Slot>,
        amount: u64,
    ) -> Result<Self, StateError> {
        if group.is_empty() || group.len() > MAX_GROUP_SIZE {
            return Err(StateError::InvalidGroup(format!(
                "group size {} not in 1..={MAX_GROUP_SIZE}",
                group.len()
            )));
        }
        for (i, slot) in group.iter().enumerate() {
            if usize::try_from(slot.slot_id).ok() != Some(i) {
                return Err(StateError::InvalidGroup(format!(
                    "slot ids must be exactly 0..N-1: position {i} has slot {}",
                    slot.slot_id
                )));
            }
        }
        let balance = amount
            .checked_sub(config.create_devshard_fee)
            .ok_or(StateError::InsufficientBalance)?;
        let st = Ledger {
            balance,
            fees: config.create_devshard_fee,
            phase: Phase::Active,
            finalize_nonce: 0,
            latest_nonce: 0,
            sealed_acc: [0; 32],
            sealed_count: 0,
            records: Records::default(),
            host_stats: vec![HostStats::default(); group.len()],
            warm_keys: Arc::default(),
        };
        let session = Session {
            escrow_id: escrow_id.into(),
            config,
            group,
        };
        Ok(StateMachine {
            session: Arc::new(session),
            st,
            warm: warm::ResolverSlot::default(),
        })
    }

    pub fn escrow_id(&self) -> &str {
        &self.session.escrow_id
    }

    pub fn config(&self) -> &SessionConfig {
        &self.session.config
    }

    pub fn group(&self) -> &[Slot] {
        &self.session.group
    }

    /// Number of slots N.
    pub fn group_size(&self) -> usize {
        self.session.group.len()
    }

    pub fn latest_nonce(&self) -> u64 {
        self.st.latest_nonce
    }

    pub fn phase(&self) -> Phase {
        self.st.phase
    }

    pub fn balance(&self) -> u64 {
        self.st.balance
    }

    pub fn fees(&self) -> u64 {
        self.st.fees
    }

    /// Nonce of the MsgFinalizeRound diff (0 while Active).
    pub fn finalize_nonce(&self) -> u64 {
        self.st.finalize_nonce
    }

    /// The sealed accumulator (all zero before the first seal).
    pub fn sealed_acc(&self) -> [u8; 32] {
        self.st.sealed_acc
    }

    /// How many records were sealed so far.
    pub fn sealed_count(&self) -> u64 {
        self.st.sealed_count
    }

    /// A live record (sealed records are gone from the live set).
    pub fn record(&self, inference_id: u64) -> Option<&InferenceRecord> {
        self.st.records.get(&inference_id)
    }

    /// All live records in id order.
    pub fn records(&self) -> impl Iterator<Item = &InferenceRecord> {
        self.st.records.iter()
    }

    /// Stats of a slot; zero for slots outside the group.
    pub fn host_stats(&self, slot_id: u32) -> HostStats {
        usize::try_from(slot_id)
            .ok()
            .and_then(|i| self.st.host_stats.get(i))
            .copied()
            .unwrap_or_default()
    }

    /// The executor of inference/nonce `nonce`: `group[nonce % N]`.
    pub fn executor_slot(&self, nonce: u64) -> &Slot {
        let group = &self.session.group;
        // `group` is non-empty (checked in `new`), so the remainder is a valid index.
        let n = group.len() as u64;
        &group[(nonce % n) as usize]
    }

    /// The owner address of a slot.
    pub fn slot_address(&self, slot_id: u32) -> Option<&Address> {
        usize::try_from(slot_id)
            .ok()
            .and_then(|i| self.session.group.get(i))
            .map(|s| &s.validator)
    }

    /// Every slot held by `addr`, ascending (multi-slot validators hold several).
    pub fn slots_of(&self, addr: &Address) -> Vec<u32> {
        self.session
            .group
            .iter()
            .filter(|s| &s.validator == addr)
            .map(|s| s.slot_id)
            .collect()
    }

    /// Vote weight of an address: its slot count.
    pub fn weight_of(&self, addr: &Address) -> u32 {
        let n = self
            .session
            .group
            .iter()
            .filter(|s| &s.validator == addr)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Settlement signature quorum: `2N/3 + 1` slots.
    pub fn quorum_threshold(&self) -> u32 {
        let n = u32::try_from(self.group_size()).unwrap_or(u32::MAX);
        2 * n / 3 + 1
    }

    /// Host side (strict). Verifies `user_sig` against `creator`, requires `nonce == latest+1`,
    /// applies every tx (any failure rejects the whole diff), charges the fee, runs phase
    /// transitions and auto-seal, then requires the computed root to equal `post_state_root`
    /// (an empty `post_state_root` is not checked, as upstream). On error nothing changes.
    pub fn apply_diff(&mut self, diff: &Diff, creator: &Address) -> Result<(), StateError> {
        diff.verify_user_sig(self.escrow_id(), creator)
            .map_err(|e| StateError::InvalidUserSig(e.to_string()))?;
        self.check_sequence(diff.nonce, &diff.txs)?;
        let mut work = self.clone();
        for tx in &diff.txs {
            work.apply_tx(diff.nonce, tx)?;
        }
        work.close_nonce(diff.nonce)?;
        work.st.records.refresh();
        let root = work.state_root();
        if !diff.post_state_root.is_empty() && diff.post_state_root.as_slice() != root.as_slice() {
            return Err(StateError::PostStateRootMismatch {
                diff: hex::encode(&diff.post_state_root),
                computed: hex::encode(root),
            });
        }
        *self = work;
        Ok(())
    }

    /// Gateway side (best effort, PROTOCOL §5.2 step 3). Applies the candidates one by one; a
    /// failing tx is skipped, except a MsgStartInference whose failure aborts the call with its
    /// error. Then fee, phase transitions and auto-seal; commits and returns the applied txs and
    /// the new root. `nonce` must be `latest + 1`, and the diff-level checks (one Start whose id
    /// is the nonce) and the per-nonce fee also abort the call. On error nothing changes.
    pub fn apply_best_effort(
        &mut self,
        nonce: u64,
        candidates: Vec<DevshardTx>,
    ) -> Result<BestEffort, StateError> {
        self.check_sequence(nonce, &candidates)?;
        let mut work = self.clone();
        let mut applied = Vec::with_capacity(candidates.len());
        let mut skipped = Vec::new();
        for tx in candidates {
            match work.apply_tx(nonce, &tx) {
                Ok(()) => applied.push(tx),
                Err(e) if matches!(tx.tx, Some(proto::Tx::StartInference(_))) => return Err(e),
                Err(e) => skipped.push((tx, e)),
            }
        }
        work.close_nonce(nonce)?;
        work.st.records.refresh();
        let root = work.state_root();
        let warm_delta = crate::protocol::warm::warm_delta(&self.st.warm_keys, &work.st.warm_keys);
        *self = work;
        Ok(BestEffort {
            applied,
            skipped,
            root,
            warm_delta,
        })
    }
}
