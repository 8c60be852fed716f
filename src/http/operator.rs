//! Operator routes: `GET /v1/admin/state` (settings in force, escrows with live snapshots,
//! participants by state; never a secret) and `POST /v1/admin/escrows/{id}/deactivate` /
//! `…/activate`, plus the escrow choice that honours deactivation ([`pick_escrow`]).
//!
//! Deactivation lives at the edge (the actors know nothing of it): the set of deactivated
//! escrow ids is in memory (`AppState::deactivated`, not persisted: a restart reactivates).
//! New requests skip those escrows; running requests finish. When the directory's pick is
//! deactivated, the edge picks the live, active escrow of the model with the fewest races in
//! flight; with none left → 503 `no_active_escrow`.

use std::collections::{BTreeMap, BTreeSet};

use actix_web::{web, HttpResponse};
use devshard_actors::directory::{GetEscrow, ListParticipants, PickEscrow, PickedEscrow};
use serde_json::json;
use slog::info;

use super::error::ApiError;
use crate::{
    escrows,
    state::{AppState, ACTOR_TIMEOUT},
};

pub use crate::state::Deactivated;

fn deactivated(state: &AppState) -> BTreeSet<String> {
    state
        .deactivated
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// The escrow for a new request of `model` (see the module docs).
pub async fn pick_escrow(state: &AppState, model: &str) -> Result<PickedEscrow, ApiError> {
    let picked = state
        .directory
        .send(PickEscrow {
            model: model.to_string(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await??;
    let off = deactivated(state);
    if !off.contains(&picked.escrow_id) {
        return Ok(picked);
    }
    let mut candidates: Vec<(usize, String)> = Vec::new();
    for s in escrows::statuses(&state.directory).await? {
        if !s.alive || s.failed || off.contains(&s.id) {
            continue;
        }
        if escrows::stored_info(&state.store, &s.id)?.is_some_and(|i| i.model == model) {
            candidates.push((s.in_flight, s.id));
        }
    }
    candidates.sort();
    for (_, id) in candidates {
        let addr = state
            .directory
            .send(GetEscrow {
                escrow_id: id.clone(),
            })
            .timeout(ACTOR_TIMEOUT)
            .await?;
        if let Some(addr) = addr {
            return Ok(PickedEscrow {
                escrow_id: id,
                addr,
            });
        }
    }
    Err(ApiError::NoActiveEscrow(model.to_string()))
}

async fn set_active(state: &AppState, id: String, active: bool) -> Result<HttpResponse, ApiError> {
    if escrows::stored_info(&state.store, &id)?.is_none() {
        return Err(ApiError::NotFound(format!("escrow {id} is not registered")));
    }
    {
        let mut set = state.deactivated.lock().unwrap_or_else(|e| e.into_inner());
        if active {
            set.remove(&id);
        } else {
            set.insert(id.clone());
        }
    }
    info!(state.log, "escrow routing changed by an admin"; "stage" => "escrow_deactivation",
        "escrow" => &id, "active" => active);
    Ok(HttpResponse::Ok().json(json!({"escrow_id": id, "active": active})))
}

/// `POST /v1/admin/escrows/{id}/deactivate`.
pub async fn deactivate(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    set_active(&state, path.into_inner(), false).await
}

/// `POST /v1/admin/escrows/{id}/activate`.
pub async fn activate(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    set_active(&state, path.into_inner(), true).await
}

/// `GET /v1/admin/state`.
pub async fn admin_state(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let off = deactivated(&state);
    let statuses = escrows::statuses(&state.directory).await?;
    let mut list = Vec::with_capacity(statuses.len());
    for s in &statuses {
        if let Some(info) = escrows::stored_info(&state.store, &s.id)? {
            let mut v = escrows::summary(&state.directory, &info, Some(s)).await;
            if let Some(o) = v.as_object_mut() {
                o.insert("active".into(), json!(!off.contains(&s.id)));
            }
            list.push(v);
        }
    }
    let views = state
        .directory
        .send(ListParticipants)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let mut by_state: BTreeMap<String, usize> = BTreeMap::new();
    for v in &views {
        let key = serde_json::to_value(v.state)
            .ok()
            .and_then(|s| s.as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{:?}", v.state));
        *by_state.entry(key).or_default() += 1;
    }
    let l = &state.limits;
    Ok(HttpResponse::Ok().json(json!({
        "signer": state.signer,
        "settings": {
            "admin_api_enabled": state.auth.admin.is_some(),
            "api_keys_configured": state.auth.api_keys.len(),
            "access": state.access,
            "accounting": state.accounting.config(),
            "default_model": l.default_model,
            "default_max_tokens": l.chat.default_max_tokens,
            "max_tokens_cap": l.chat.max_tokens_cap,
            "max_body_bytes": l.max_body_bytes,
            "race": format!("{:?}", l.race),
            "races_available": state.races.available_permits(),
            "chain_poll": state.polling.settings(),
        },
        "requests_tracked": state.accounting.len(),
        "escrows": list,
        "deactivated_escrows": off,
        "participants": {"total": views.len(), "by_state": by_state},
    })))
}
