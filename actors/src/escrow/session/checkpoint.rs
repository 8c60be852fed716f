//! State checkpoints: a restart replays the diffs after the newest checkpoint, not the whole log.
//!
//! Found by the hour-long chaos run: [`Session::restore`] replayed an escrow's log from nonce 1,
//! recomputing every diff's root over every live record, so a restart took 7, 14 and then 41 s
//! at nonces 12 000, 15 500 and 18 000 (with 2 000–3 600 inferences open, each a live record),
//! and the third restart after a `kill -9` missed the runner's readiness bound. Restart time grew
//! with the escrow's age, which an escrow of a million nonces would pay in minutes.
//!
//! Every `[escrow] checkpoint_every` ([`CHECKPOINT_EVERY`], 1 000) nonces the escrow writes its whole state machine
//! ([`StateSnapshot`]) with the nonce and root it has (`ns::CHECKPOINTS`, key = escrow id; the
//! newest only). It is written after the diffs up to that nonce were submitted, so it commits
//! after them; a checkpoint is used only when the durable diff at its nonce exists and has the
//! checkpoint's root (else the whole log replays, as before — e.g. a checkpoint that got ahead
//! of the log on a store that does not order writes, or one left by a deleted escrow of the same
//! id). The diffs after it replay exactly as before, every root checked.

use serde::{Deserialize, Serialize};

use super::{Session, SessionError};
use crate::{
    escrow::info::EscrowInfo,
    protocol::{
        diff::Diff,
        state::{InferenceStatus, StateMachine, StateSnapshot},
    },
    store::{ns, Store, StoreError, WarmDeltas},
};
use std::sync::Arc;

/// Where a restored session came from (a metric label and a log field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoredFrom {
    /// The newest checkpoint and the diffs after it.
    Checkpoint,
    /// The whole log (no checkpoint yet, or one that does not match the log).
    Log,
}

impl RestoredFrom {
    pub const ALL: [RestoredFrom; 2] = [RestoredFrom::Checkpoint, RestoredFrom::Log];

    pub fn as_str(self) -> &'static str {
        match self {
            RestoredFrom::Checkpoint => "checkpoint",
            RestoredFrom::Log => "log",
        }
    }
}

/// Why a session could not be restored from the store.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// Restores an escrow's session from the store: the newest checkpoint that matches the log and
/// the diffs after it, else the whole log. Returns the session, where it came from and how many
/// diffs were replayed.
pub fn restore_durable(
    store: &dyn Store,
    info: Arc<EscrowInfo>,
    warm: &WarmDeltas,
) -> Result<(Session, RestoredFrom, usize), RestoreError> {
    let id = info.escrow_id.clone();
    let checkpoint = store
        .get(ns::CHECKPOINTS, &id)?
        .and_then(|v| serde_json::from_value::<Checkpoint>(v).ok());
    if let Some(cp) = checkpoint {
        let tail = store.load_diffs_from(&id, cp.nonce)?;
        let replayed = tail.len().saturating_sub(1);
        if let Some(s) = Session::restore_from_checkpoint(info.clone(), cp, tail, warm)? {
            return Ok((s, RestoredFrom::Checkpoint, replayed));
        }
    }
    let log = store.load_diffs(&id)?;
    let replayed = log.len();
    Ok((
        Session::restore(info, log, warm)?,
        RestoredFrom::Log,
        replayed,
    ))
}

/// Nonces between two checkpoints by default (`[escrow] checkpoint_every`).
pub const CHECKPOINT_EVERY: u64 = 1_000;

/// The persisted checkpoint of one escrow.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    pub nonce: u64,
    /// Hex of the state root at `nonce` (the diff's `post_state_root`).
    pub root: String,
    pub state: StateSnapshot,
}

/// Whether a checkpoint is due: `every` nonces (at least 1) past the last one (pure).
pub fn checkpoint_due(nonce: u64, last_checkpoint: u64, every: u64) -> bool {
    nonce >= last_checkpoint.saturating_add(every.max(1))
}

impl Session {
    /// The state machine as it is now, at [`Session::nonce`].
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            nonce: self.nonce(),
            root: hex::encode(self.sm.state_root()),
            state: self.sm.snapshot(),
        }
    }

    /// Rebuilds a session from `checkpoint` and the diffs after it. `tail` must start with the
    /// durable diff at the checkpoint's nonce (its root must be the checkpoint's); `None` when
    /// the checkpoint does not match the log, and the caller replays the whole log instead.
    pub fn restore_from_checkpoint(
        info: Arc<EscrowInfo>,
        checkpoint: Checkpoint,
        tail: Vec<Diff>,
        warm: &WarmDeltas,
    ) -> Result<Option<Session>, SessionError> {
        let mut tail = tail.into_iter();
        let Some(at) = tail.next() else {
            return Ok(None);
        };
        let matches = at.nonce == checkpoint.nonce
            && hex::encode(&at.post_state_root) == checkpoint.root
            && checkpoint.state.latest_nonce == checkpoint.nonce;
        if !matches {
            return Ok(None);
        }
        let Ok(sm) = StateMachine::from_snapshot(checkpoint.state) else {
            return Ok(None);
        };
        if hex::encode(sm.state_root()) != checkpoint.root {
            return Ok(None);
        }
        let mut s = Session::new(info)?;
        s.finished = sm
            .records()
            .filter(|r| {
                !matches!(
                    r.status,
                    InferenceStatus::Pending | InferenceStatus::Started | InferenceStatus::TimedOut
                )
            })
            .map(|r| r.inference_id)
            .collect();
        s.sm = sm;
        s.hold(Arc::new(at));
        s.replay_log(tail, warm)?;
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_due_every_so_many_nonces() {
        assert!(!checkpoint_due(999, 0, CHECKPOINT_EVERY));
        assert!(checkpoint_due(1_000, 0, CHECKPOINT_EVERY));
        assert!(!checkpoint_due(1_999, 1_000, CHECKPOINT_EVERY));
        assert!(checkpoint_due(2_500, 1_000, CHECKPOINT_EVERY));
        assert!(!checkpoint_due(5, u64::MAX, CHECKPOINT_EVERY), "saturates");
        assert!(checkpoint_due(1, 0, 0), "at least every nonce");
    }
}
