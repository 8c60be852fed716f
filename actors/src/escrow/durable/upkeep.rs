//! The durability path's upkeep on the escrow's 1 s tick: host sync nonces persisted when they
//! changed, encoded diffs every host holds dropped, and an idle escrow's encoded diffs released
//! ([`Durable::went_idle`]; the session compacts its window then), and a state checkpoint every
//! `checkpoint_every` nonces ([`Durable::checkpoint`], `session/checkpoint.rs`).

use std::collections::BTreeMap;

use slog::{debug, warn};

use super::{Durable, IDLE_AFTER_TICKS};
use crate::{
    escrow::{
        session::{checkpoint::checkpoint_due, Session},
        EscrowDeps,
    },
    store::ns,
};

impl Durable {
    /// A host's sync nonce changed (persisted by the next `sync_persist` tick).
    pub(in crate::escrow) fn syncs_changed(&mut self) {
        self.sync_dirty = true;
    }

    /// `true` once, at the tick that finds the escrow idle: its nonce has not moved for
    /// [`IDLE_AFTER_TICKS`] ticks. The encoded diffs are dropped then (the caller compacts the
    /// session's window); a new nonce makes it busy again.
    pub(in crate::escrow) fn went_idle(&mut self, nonce: u64) -> bool {
        let (last, ticks) = self.quiet;
        let ticks = if last == nonce {
            ticks.saturating_add(1)
        } else {
            0
        };
        self.quiet = (nonce, ticks);
        if ticks != IDLE_AFTER_TICKS {
            return false;
        }
        self.wire.forget_below(nonce.saturating_add(1));
        true
    }

    /// Writes the host sync nonces when they changed (in the background; a failure is logged),
    /// and drops the encoded diffs every host holds.
    pub(in crate::escrow) fn persist_syncs(&mut self, session: &Session, deps: &EscrowDeps) {
        self.wire.forget_below(session.first_held());
        if !self.sync_dirty {
            return;
        }
        self.sync_dirty = false;
        let syncs: BTreeMap<String, u64> = session
            .host_syncs()
            .iter()
            .map(|(a, n)| (a.to_string(), *n))
            .collect();
        let record = serde_json::json!({ "host_sync": syncs });
        let ack = deps
            .store
            .put(ns::SESSIONS, &session.info().escrow_id, record);
        let log = deps.log.clone();
        actix::spawn(async move {
            if let Err(e) = ack.await {
                warn!(log, "sync nonces not persisted"; "stage" => "store_error", "error" => %e);
            }
        });
    }

    /// Writes the session's state as its checkpoint when `checkpoint_every` nonces passed since
    /// the last one. The put is submitted after every diff up to the session's nonce, so it
    /// commits after them; a restart uses it only when the log holds its nonce with its root.
    pub(in crate::escrow) fn checkpoint(&mut self, session: &Session, deps: &EscrowDeps) {
        let nonce = session.nonce();
        if !checkpoint_due(nonce, self.last_checkpoint, deps.cfg.checkpoint_every) {
            return;
        }
        self.last_checkpoint = nonce;
        let value = match serde_json::to_value(session.checkpoint()) {
            Ok(v) => v,
            Err(e) => {
                warn!(deps.log, "state checkpoint not encoded"; "stage" => "store_error",
                    "nonce" => nonce, "error" => %e);
                return;
            }
        };
        let ack = deps
            .store
            .put(ns::CHECKPOINTS, &session.info().escrow_id, value);
        deps.metrics.escrow_checkpoints.inc();
        debug!(deps.log, "state checkpoint written"; "stage" => "escrow_checkpoint",
            "nonce" => nonce);
        let log = deps.log.clone();
        actix::spawn(async move {
            if let Err(e) = ack.await {
                warn!(log, "state checkpoint not persisted"; "stage" => "store_error", "error" => %e);
            }
        });
    }
}
