//! Removing a registered escrow, one code path for both callers:
//! `DELETE /v1/admin/escrows/{id}` (`http::escrow_delete`, `by: admin`) and the rotation's
//! retention of settled escrows (`rotation::retention`, `by: retention`).
//!
//! [`Remover::remove`] reads the registration, the durable settlement record and the nonces the
//! escrow sequenced, applies the deletion rule (`http::escrow_delete::decide`: settled, or never
//! used with `force`), then writes the archive row (`escrow_archive::Archived`, namespace
//! `escrow_deleted`, with `by`), sends `RemoveEscrow` to the directory (the registration and its
//! key reference go, the escrow actor retires; other replicas' directories forget it at their
//! next ownership round, when its registration is no longer listed), clears a deactivation,
//! counts `devshard_escrow_deletions_total{result}` and logs stage `escrow_removed` with `by`
//! (refusals: `escrow_delete_refused`). The diff log, the session and settlement records and the
//! cost ledger are kept.

use devshard_actors::{
    clock::SharedClock,
    directory::{Directory, DirectoryError, GetEscrow, RemoveEscrow},
    escrow::messages::GetSnapshot,
    settlement::{load_record, SettlementState},
    stats::TrackedAddr,
    store::SharedStore,
};
use prometheus::IntCounterVec;
use slog::{info, warn, Logger};

use crate::{
    escrow_archive::{Archived, Deletable, RemovedBy, NS_DELETED},
    escrows,
    http::{error::ApiError, escrow_delete::decide},
    state::{AppState, Deactivated, ACTOR_TIMEOUT, NS_DEACTIVATED},
};

/// What a removal needs (cheap to clone).
#[derive(Clone)]
pub struct Remover {
    pub store: SharedStore,
    pub directory: TrackedAddr<Directory>,
    pub clock: SharedClock,
    pub deactivated: Deactivated,
    /// `devshard_escrow_deletions_total{result}`.
    pub deletions: IntCounterVec,
    pub log: Logger,
}

impl std::fmt::Debug for Remover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remover").finish_non_exhaustive()
    }
}

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removal {
    /// `?force=true`: an escrow that never granted a nonce may go unsettled.
    pub force: bool,
    /// `?purge=true`: an unused escrow's (empty) log and session record go too.
    pub purge: bool,
    pub by: RemovedBy,
}

impl Removal {
    /// The retention's removal of a settled escrow (neither `force` nor `purge`).
    pub fn retention() -> Removal {
        Removal {
            force: false,
            purge: false,
            by: RemovedBy::Retention,
        }
    }
}

/// What was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub reason: Deletable,
    /// The nonces it had sequenced.
    pub nonce: u64,
}

/// The `result` label of a removal.
fn result_label(by: RemovedBy, reason: Deletable) -> &'static str {
    match (by, reason) {
        (RemovedBy::Admin, Deletable::Settled) => "deleted_settled",
        (RemovedBy::Admin, Deletable::Unused) => "deleted_unused",
        (RemovedBy::Retention, _) => "retention_settled",
    }
}

impl Remover {
    pub fn of(state: &AppState) -> Remover {
        Remover {
            store: state.store.clone(),
            directory: state.directory.clone(),
            clock: state.clock.clone(),
            deactivated: state.deactivated.clone(),
            deletions: state.metrics.deletions.clone(),
            log: state.log.clone(),
        }
    }

    /// Removes escrow `id` as asked (see the module docs): 404 when it is not registered, 409
    /// when the rule refuses it.
    pub async fn remove(&self, id: &str, ask: Removal) -> Result<Removed, ApiError> {
        let Some(info) = escrows::stored_info(&self.store, id)? else {
            return Err(DirectoryError::UnknownEscrow(id.to_owned()).into());
        };
        let settlement = load_record(&self.store, id).map_or(SettlementState::Active, |r| r.state);
        let nonce = self.sequenced(id).await?;
        let count = |result: &str| self.deletions.with_label_values(&[result]).inc();
        let reason = match decide(settlement.label(), nonce, ask.force, ask.purge) {
            Ok(r) => r,
            Err(refusal) => {
                count(refusal.label());
                let e = refusal.into_error(id);
                warn!(self.log, "escrow deletion refused"; "stage" => "escrow_delete_refused",
                    "escrow" => id, "by" => ask.by.label(), "error" => %e);
                return Err(e);
            }
        };
        let archive = Archived {
            escrow_id: id.to_owned(),
            reason,
            by: ask.by,
            nonce,
            deleted_at_ms: self.clock.now_ms(),
            registration: info,
        };
        let archive =
            serde_json::to_value(archive).map_err(|e| ApiError::Internal(e.to_string()))?;
        self.store
            .put(NS_DELETED, id, archive)
            .await
            .map_err(|e| ApiError::Internal(format!("archiving escrow {id}: {e}")))?;
        let purge = ask.purge && reason == Deletable::Unused;
        self.directory
            .send(RemoveEscrow {
                escrow_id: id.to_owned(),
                purge,
            })
            .timeout(ACTOR_TIMEOUT)
            .await??;
        // A deactivation dies with the registration (a later registration starts active).
        self.store
            .delete(NS_DEACTIVATED, id)
            .await
            .map_err(|e| ApiError::Internal(format!("clearing escrow {id}'s deactivation: {e}")))?;
        if let Ok(mut set) = self.deactivated.lock() {
            set.remove(id);
        }
        count(result_label(ask.by, reason));
        info!(self.log, "escrow removed"; "stage" => "escrow_removed", "escrow" => id,
            "by" => ask.by.label(), "reason" => ?reason, "nonce" => nonce, "purge" => purge);
        Ok(Removed { reason, nonce })
    }

    /// Nonces the escrow sequenced: its live actor's, else its durable log's.
    async fn sequenced(&self, id: &str) -> Result<u64, ApiError> {
        let get = GetEscrow {
            escrow_id: id.to_string(),
        };
        if let Some(addr) = self.directory.send(get).timeout(ACTOR_TIMEOUT).await? {
            if let Ok(snap) = addr.send(GetSnapshot).timeout(ACTOR_TIMEOUT).await {
                if snap.nonce > 0 {
                    return Ok(snap.nonce);
                }
            }
        }
        let log = self
            .store
            .load_diffs(id)
            .map_err(|e| ApiError::Internal(format!("reading escrow {id}'s diff log: {e}")))?;
        Ok(log.last().map_or(0, |d| d.nonce))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_removal_is_counted_apart_from_an_admin_deletion() {
        assert_eq!(
            result_label(RemovedBy::Admin, Deletable::Settled),
            "deleted_settled"
        );
        assert_eq!(
            result_label(RemovedBy::Admin, Deletable::Unused),
            "deleted_unused"
        );
        assert_eq!(
            result_label(RemovedBy::Retention, Deletable::Settled),
            "retention_settled"
        );
        assert_eq!(
            Removal::retention(),
            Removal {
                force: false,
                purge: false,
                by: RemovedBy::Retention
            }
        );
    }
}
