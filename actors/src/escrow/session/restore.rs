//! Rebuilding a session from a diff log: its own durable log at start, or the diffs another
//! gateway left on the hosts when an escrow is adopted (`escrow/adopt`). Both go through
//! [`Session::replay`], one diff at a time.

use std::sync::Arc;

use super::{Session, SessionError};
use crate::{
    escrow::info::EscrowInfo,
    protocol::{diff::Diff, proto::Tx, state::StateError, warm::WarmBinding},
    store::WarmDeltas,
};

/// Why a diff does not replay on the session (typed; the adoption reports it per diff).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReplayFault {
    /// The state machine refused the diff as a whole (wrong nonce, Start rules, fee).
    #[error("{0}")]
    Refused(StateError),
    /// One of its txs does not apply (a diff applies atomically on the hosts).
    #[error("tx {index} does not apply: {reason}")]
    TxFails { index: usize, reason: StateError },
    /// Every tx applies but the state root differs from the diff's `post_state_root`.
    #[error("post_state_root differs from the replayed root")]
    RootDiffers,
}

impl Session {
    /// Rebuilds a session from its durable diff log: every diff must replay to its own root.
    /// Before each diff is replayed, the warm keys it bound are injected, so the replay needs no
    /// chain: a warm signature of an already-bound key takes the bound path (docs/lifecycle.md §5).
    pub fn restore(
        info: Arc<EscrowInfo>,
        log: Vec<Diff>,
        warm: &WarmDeltas,
    ) -> Result<Session, SessionError> {
        let mut s = Session::new(info)?;
        s.replay_log(log, warm)?;
        Ok(s)
    }

    /// Replays durable diffs in order (each with the warm keys it bound injected first).
    pub(super) fn replay_log(
        &mut self,
        log: impl IntoIterator<Item = Diff>,
        warm: &WarmDeltas,
    ) -> Result<(), SessionError> {
        for diff in log {
            let nonce = diff.nonce;
            if let Some(delta) = warm.get(&nonce) {
                self.sm
                    .inject_warm_keys(delta)
                    .map_err(|e| SessionError::Corrupt {
                        nonce,
                        reason: format!("warm-key delta: {e}"),
                    })?;
            }
            self.replay(diff).map_err(|e| SessionError::Corrupt {
                nonce,
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// Replays one signed diff at the next nonce: every tx must apply and the root must be the
    /// diff's own. Returns the warm keys it bound. The `user_sig` is not checked here (our own
    /// log is ours; the adoption checks it first). On error the session is left part-way and
    /// must be discarded.
    pub fn replay(&mut self, diff: Diff) -> Result<Vec<WarmBinding>, ReplayFault> {
        let nonce = diff.nonce;
        let applied = self
            .sm
            .apply_best_effort(nonce, diff.txs.clone())
            .map_err(ReplayFault::Refused)?;
        if let Some((tx, reason)) = applied.skipped.into_iter().next() {
            let index = diff.txs.iter().position(|t| *t == tx).unwrap_or_default();
            return Err(ReplayFault::TxFails { index, reason });
        }
        if applied.root.as_slice() != diff.post_state_root {
            return Err(ReplayFault::RootDiffers);
        }
        for tx in &diff.txs {
            self.pending.mark_seen(tx);
            if let Some(Tx::FinishInference(f)) = &tx.tx {
                self.finished.insert(f.inference_id);
            }
        }
        self.hold(Arc::new(diff));
        Ok(applied.warm_delta)
    }
}
