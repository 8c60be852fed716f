//! Settlement admin routes (docs/lifecycle.md §1–§3), behind the admin key:
//!
//! - `POST /v1/admin/escrows/{id}/settle` → 202 with the settlement record; a second call joins
//!   the running settlement;
//! - `POST /v1/admin/escrows/{id}/finalize` → drains, finalizes and collects, broadcasts
//!   nothing: 202 with the record, whose `payload` is the settlement payload once collected;
//! - `GET /v1/admin/escrows/{id}/settlement` → state, payload, weight and threshold, tx hash,
//!   attempts, last error;
//! - `POST /v1/admin/escrows/{id}/signatures/collect?nonce=N` → the state signatures of nonce
//!   N the escrow holds, verified, with their weight.

use actix_web::{web, HttpResponse};
use devshard_actors::{directory::GetEscrow, escrow::messages::GetFinalState, settlement::quorum};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::state::{settlements::SettleError, AppState, ACTOR_TIMEOUT};

fn view(record: Option<devshard_actors::settlement::SettlementRecord>) -> Value {
    match record {
        None => json!({"state": "active"}),
        Some(r) => {
            let tx_hash = r.tx_hashes.last().cloned();
            json!({
                "escrow_id": r.escrow_id,
                "state": r.state.label(),
                "detail": r.state,
                "broadcast": r.broadcast,
                "payload": r.payload,
                "weight": r.weight.map(|w| w.weight),
                "threshold": r.weight.map(|w| w.threshold),
                "tx_hash": tx_hash,
                "tx_hashes": r.tx_hashes,
                "attempts": r.attempts,
                "last_error": r.last_error,
                "started_ms": r.started_ms,
                "updated_ms": r.updated_ms,
            })
        }
    }
}

/// `POST /v1/admin/escrows/{id}/settle`.
pub async fn settle(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let record = state.settlements.start(&path.into_inner(), true).await?;
    Ok(HttpResponse::Accepted().json(view(Some(record))))
}

/// `POST /v1/admin/escrows/{id}/finalize`.
pub async fn finalize(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let record = state.settlements.start(&path.into_inner(), false).await?;
    Ok(HttpResponse::Accepted().json(view(Some(record))))
}

/// `GET /v1/admin/escrows/{id}/settlement`.
pub async fn get(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let record = state.settlements.get(&path.into_inner()).await?;
    Ok(HttpResponse::Ok().json(view(record)))
}

#[derive(Debug, Deserialize)]
pub struct CollectQuery {
    nonce: u64,
}

/// `POST /v1/admin/escrows/{id}/signatures/collect?nonce=N`.
pub async fn collect(
    path: web::Path<String>,
    query: web::Query<CollectQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let addr = state
        .directory
        .send(GetEscrow {
            escrow_id: id.clone(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await?
        .ok_or_else(|| ApiError::Settle(SettleError::UnknownEscrow(id.clone())))?;
    let fin = addr.send(GetFinalState).timeout(ACTOR_TIMEOUT).await?;
    let nonce = query.nonce;
    let root = fin.state.root_with_phase(fin.state.phase());
    let group = fin.state.group();
    let mut sigs = std::collections::BTreeMap::new();
    if nonce == fin.state.latest_nonce() {
        for (slot, sig) in &fin.signatures {
            let acceptance = |v: &_, r: &_| fin.state.address_acceptance(v, r);
            let at = (root.as_slice(), nonce);
            if let Ok(a) = quorum::accept_state_signature(group, &id, at, *slot, sig, acceptance) {
                quorum::record(group, &mut sigs, &a.validator, sig);
            }
        }
    }
    let w = quorum::weight(group, &sigs);
    Ok(HttpResponse::Ok().json(json!({
        "escrow_id": id,
        "nonce": nonce,
        "latest_nonce": fin.state.latest_nonce(),
        "slots": sigs.keys().collect::<Vec<_>>(),
        "weight": w.weight,
        "threshold": w.threshold,
        "quorum": w.reached(),
    })))
}
