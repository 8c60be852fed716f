//! Rebuilding a session from its durable diff log and the warm-key deltas stored with it.

use std::sync::Arc;

use super::{Session, SessionError};
use crate::{
    escrow::info::EscrowInfo,
    protocol::{diff::Diff, proto::Tx},
    store::WarmDeltas,
};

impl Session {
    /// Rebuilds a session from its durable diff log: every diff must replay to its own root.
    /// Before each diff is replayed, the warm keys it bound are injected, so the replay needs no
    /// chain: a warm signature of an already-bound key takes the bound path (LIFECYCLE.md §5).
    pub fn restore(
        info: Arc<EscrowInfo>,
        log: Vec<Diff>,
        warm: &WarmDeltas,
    ) -> Result<Session, SessionError> {
        let mut s = Session::new(info)?;
        for diff in log {
            let nonce = diff.nonce;
            if let Some(delta) = warm.get(&nonce) {
                s.sm.inject_warm_keys(delta)
                    .map_err(|e| SessionError::Corrupt {
                        nonce,
                        reason: format!("warm-key delta: {e}"),
                    })?;
            }
            let applied =
                s.sm.apply_best_effort(nonce, diff.txs.clone())
                    .map_err(|e| SessionError::Corrupt {
                        nonce,
                        reason: e.to_string(),
                    })?;
            if applied.applied.len() != diff.txs.len()
                || applied.root.as_slice() != diff.post_state_root
            {
                return Err(SessionError::Corrupt {
                    nonce,
                    reason: "root differs on replay".into(),
                });
            }
            for tx in &diff.txs {
                s.pending.mark_seen(tx);
                if let Some(Tx::FinishInference(f)) = &tx.tx {
                    s.finished.insert(f.inference_id);
                }
            }
            s.diffs.insert(nonce, Arc::new(diff));
        }
        Ok(s)
    }
}
