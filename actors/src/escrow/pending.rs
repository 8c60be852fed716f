//! The queue of transactions waiting for the next composed diff (docs/protocol.md §5.2, §5.5).
//!
//! Transactions come from receipts (`MsgConfirmStart`), hosts' mempools (finishes, validations,
//! votes) and our own timeout handling. They are ordered by priority — ConfirmStart 0 < Finish 1 <
//! Validation 2 < ValidationVote 3 < others 4 — with a stable order inside a priority, and each
//! host-proposed tx is queued at most once (dedup keys [`TxKey`]: confirm and finish of an
//! inference, validation and vote of an inference by a slot, a slot's seed reveal). Unlike upstream, a key is forgotten again when
//! its tx was *skipped* by best-effort apply for a reason that can change (e.g. a finish seen
//! before its confirm), so it can be re-queued when a host shows it again.

use std::collections::{BTreeSet, VecDeque};

use crate::protocol::proto::{DevshardTx, Tx};

/// Priority of a tx in a composed diff (lower first).
pub fn priority(tx: &DevshardTx) -> u8 {
    match &tx.tx {
        Some(Tx::ConfirmStart(_)) => 0,
        Some(Tx::FinishInference(_)) => 1,
        Some(Tx::Validation(_)) => 2,
        Some(Tx::ValidationVote(_)) => 3,
        _ => 4,
    }
}

/// Dedup key of a host-proposed tx: which tx of which inference (and slot). Typed, with no
/// allocation: an escrow keeps every key it ever queued (two or more per inference for its
/// whole life), which as strings (`confirm:<id>`, …) cost ≈ 130 B per request (issue 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxKey {
    Confirm(u64),
    Finish(u64),
    Validation { inference: u64, slot: u32 },
    Vote { inference: u64, slot: u32 },
    RevealSeed(u32),
}

/// Dedup key of a host-proposed tx; user-proposed txs have none.
pub fn dedup_key(tx: &DevshardTx) -> Option<TxKey> {
    match &tx.tx {
        Some(Tx::ConfirmStart(m)) => Some(TxKey::Confirm(m.inference_id)),
        Some(Tx::FinishInference(m)) => Some(TxKey::Finish(m.inference_id)),
        Some(Tx::Validation(m)) => Some(TxKey::Validation {
            inference: m.inference_id,
            slot: m.validator_slot,
        }),
        Some(Tx::ValidationVote(m)) => Some(TxKey::Vote {
            inference: m.inference_id,
            slot: m.voter_slot,
        }),
        Some(Tx::RevealSeed(m)) => Some(TxKey::RevealSeed(m.slot_id)),
        _ => None,
    }
}

/// Pending txs plus the set of keys ever queued.
#[derive(Debug, Default, Clone)]
pub struct PendingTxs {
    queue: VecDeque<DevshardTx>,
    seen: BTreeSet<TxKey>,
}

impl PendingTxs {
    /// Queues `tx` unless its key was seen before. Returns whether it was queued.
    pub fn push(&mut self, tx: DevshardTx) -> bool {
        if let Some(key) = dedup_key(&tx) {
            if !self.seen.insert(key) {
                return false;
            }
        }
        self.queue.push_back(tx);
        true
    }

    /// Records a tx's key as seen without queueing it (it is already sequenced).
    pub fn mark_seen(&mut self, tx: &DevshardTx) {
        if let Some(key) = dedup_key(tx) {
            self.seen.insert(key);
        }
    }

    /// Forgets a key so the same tx may be queued again.
    pub fn forget(&mut self, tx: &DevshardTx) {
        if let Some(key) = dedup_key(tx) {
            self.seen.remove(&key);
        }
    }

    /// Whether a finish marker of inference `id` waits for the next diff.
    pub fn holds_finish(&self, id: u64) -> bool {
        self.queue
            .iter()
            .any(|tx| matches!(&tx.tx, Some(Tx::FinishInference(f)) if f.inference_id == id))
    }

    /// Whether a key was ever queued (e.g. `TxKey::Finish(id)`).
    pub fn has_seen(&self, key: &TxKey) -> bool {
        self.seen.contains(key)
    }

    /// Takes every pending tx in priority order (stable within a priority).
    pub fn take_ordered(&mut self) -> Vec<DevshardTx> {
        let mut txs: Vec<DevshardTx> = self.queue.drain(..).collect();
        txs.sort_by_key(priority);
        txs
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether every pending tx is a confirmed timeout (none a vote's verifiers need to judge
    /// another nonce: a ConfirmStart or a finish).
    pub fn only_timeouts(&self) -> bool {
        self.queue
            .iter()
            .all(|tx| matches!(&tx.tx, Some(Tx::TimeoutInference(_))))
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Pending txs in queue order (debug output).
    pub fn iter(&self) -> impl Iterator<Item = &DevshardTx> {
        self.queue.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::{MsgConfirmStart, MsgFinalizeRound, MsgFinishInference};

    fn confirm(id: u64) -> DevshardTx {
        DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
            inference_id: id,
            ..Default::default()
        }))
    }
    fn finish(id: u64) -> DevshardTx {
        DevshardTx::new(Tx::FinishInference(MsgFinishInference {
            inference_id: id,
            ..Default::default()
        }))
    }

    #[test]
    fn orders_by_priority_and_dedups() {
        let mut p = PendingTxs::default();
        assert!(p.push(finish(1)));
        assert!(p.push(DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {}))));
        assert!(p.push(confirm(2)));
        assert!(p.push(confirm(1)));
        assert!(!p.push(confirm(1)));
        let order: Vec<u8> = p.take_ordered().iter().map(priority).collect();
        assert_eq!(order, vec![0, 0, 1, 4]);
        assert!(p.is_empty());
        assert!(
            !p.push(finish(1)),
            "a key stays seen after the tx left the queue"
        );
        p.forget(&finish(1));
        assert!(p.push(finish(1)));
    }

    #[test]
    fn keys_are_typed_and_held_inline() {
        let mut p = PendingTxs::default();
        assert!(p.push(confirm(7)));
        assert!(p.push(finish(7)));
        assert!(p.has_seen(&TxKey::Confirm(7)) && p.has_seen(&TxKey::Finish(7)));
        assert!(!p.has_seen(&TxKey::Finish(8)) && !p.has_seen(&TxKey::Confirm(70)));
        // A key is a value of 16 bytes: nothing on the heap per key.
        assert_eq!(std::mem::size_of::<TxKey>(), 16);
    }
}
