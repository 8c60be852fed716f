//! `DELETE /v1/admin/escrows/{id}[?force=true][&purge=true]`: unregistering an escrow.
//!
//! | escrow | answer |
//! |---|---|
//! | settled on chain (its settlement record says so) | 200, `reason: settled` |
//! | never granted a nonce (no diff composed, none in the store), with `?force=true` | 200, `reason: unused` |
//! | used and not settled, with `?force=true` | 409 `escrow_in_use` |
//! | not settled, without `force` | 409 `escrow_not_settled` (its settlement state named) |
//! | settled, with `?purge=true` | 409 `escrow_kept_for_accounting` |
//! | not registered | 404 `escrow_not_found` |
//!
//! What is kept: the escrow's diff log, its session record and its settlement record stay in
//! the store, and an archive row `escrow_deleted/{id}` records the registration, the nonce it
//! reached, why it was deleted and when. The cost ledger (`GET /v1/admin/ledger`,
//! `GET /v1/requests/{id}`) is a separate store and is never touched, so a deleted escrow's
//! spend is still reported (its settle tail reads the archived registration). Only the
//! registration (and its key reference) goes: the escrow is no longer served, listed or
//! settled, and a deactivation of it is cleared. `purge=true` also removes the (empty) log and
//! session record of an unused escrow.
//!
//! The removal is `crate::escrow_removal` (shared with the rotation's retention of settled
//! escrows, `rotation.settled_retention_s`): log stage `escrow_removed` with `by = admin`
//! (refusals: `escrow_delete_refused`); metric `devshard_escrow_deletions_total{result}`. The
//! archive row carries `by: admin`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::json;

use super::error::ApiError;
use crate::{
    escrow_archive::{Deletable, RemovedBy},
    escrow_removal::{Removal, Removed, Remover},
    state::AppState,
};

/// Why a deletion is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not settled; `state` is its settlement state label.
    NotSettled { state: &'static str },
    /// `force` on an escrow that granted nonces.
    InUse { nonce: u64 },
    /// `purge` on a settled escrow, whose log is kept for accounting.
    KeptForAccounting,
}

impl Refusal {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Refusal::NotSettled { .. } => "refused_not_settled",
            Refusal::InUse { .. } => "refused_in_use",
            Refusal::KeptForAccounting => "refused_purge",
        }
    }

    pub(crate) fn into_error(self, id: &str) -> ApiError {
        let (code, message) = match self {
            Refusal::NotSettled { state } => (
                "escrow_not_settled",
                format!(
                    "escrow {id} is not settled (settlement state: {state}): settle it first \
                     (POST /v1/admin/escrows/{id}/settle); only an escrow that never granted a \
                     nonce may be deleted before, with ?force=true"
                ),
            ),
            Refusal::InUse { nonce } => (
                "escrow_in_use",
                format!(
                    "escrow {id} has sequenced {nonce} nonces and is not settled: ?force=true \
                     deletes only an escrow that never granted a nonce; settle it first"
                ),
            ),
            Refusal::KeptForAccounting => (
                "escrow_kept_for_accounting",
                format!(
                    "escrow {id} is settled; its diff log is kept for accounting and cannot be \
                     purged (delete it without ?purge=true)"
                ),
            ),
        };
        ApiError::EscrowConflict { code, message }
    }
}

/// The rule (pure): `state` is the settlement state label (`settled` when settled), `nonce` the
/// nonces the escrow sequenced.
pub fn decide(
    state: &'static str,
    nonce: u64,
    force: bool,
    purge: bool,
) -> Result<Deletable, Refusal> {
    match (state == "settled", force, nonce) {
        (true, _, _) if purge => Err(Refusal::KeptForAccounting),
        (true, _, _) => Ok(Deletable::Settled),
        (false, true, 0) => Ok(Deletable::Unused),
        (false, true, nonce) => Err(Refusal::InUse { nonce }),
        (false, false, _) => Err(Refusal::NotSettled { state }),
    }
}

/// True for `name=true|1|yes|on` (or a bare `name`) in a query string.
pub fn query_flag(query: &str, name: &str) -> bool {
    query.split('&').any(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        k == name && matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on")
    })
}

/// `DELETE /v1/admin/escrows/{id}` (see the module docs; the removal itself is
/// `crate::escrow_removal`, shared with the rotation's retention of settled escrows).
pub async fn delete_escrow(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let ask = Removal {
        force: query_flag(req.query_string(), "force"),
        purge: query_flag(req.query_string(), "purge"),
        by: RemovedBy::Admin,
    };
    let Removed { reason, nonce } = Remover::of(&state).remove(&id, ask).await?;
    Ok(HttpResponse::Ok().json(json!({
        "escrow_id": id, "deleted": true, "purged": ask.purge, "reason": reason, "nonce": nonce,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_settled_or_never_used_escrows_go() {
        assert_eq!(decide("settled", 90, false, false), Ok(Deletable::Settled));
        assert_eq!(decide("settled", 90, true, false), Ok(Deletable::Settled));
        assert_eq!(
            decide("settled", 90, false, true),
            Err(Refusal::KeptForAccounting)
        );
        assert_eq!(decide("active", 0, true, true), Ok(Deletable::Unused));
        assert_eq!(
            decide("active", 3, true, false),
            Err(Refusal::InUse { nonce: 3 })
        );
        assert_eq!(
            decide("draining", 0, false, false),
            Err(Refusal::NotSettled { state: "draining" })
        );
    }

    #[test]
    fn flags_read_like_purge_did() {
        assert!(query_flag("force=true", "force"));
        assert!(query_flag("purge=1&force=YES", "force"));
        assert!(query_flag("force", "force"));
        assert!(!query_flag("force=false", "force"));
        assert!(!query_flag("forced=true", "force"));
    }
}
