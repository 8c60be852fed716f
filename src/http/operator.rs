//! Operator routes: `GET /v1/admin/state` (settings in force, escrows with live snapshots,
//! participants by state; never a secret) and `POST /v1/admin/escrows/{id}/deactivate` /
//! `…/activate`, plus the escrow choice that honours deactivation ([`pick_escrow`]).
//!
//! Deactivation lives at the edge: the set of deactivated escrow ids (`AppState::deactivated`)
//! is persisted (namespace `escrow_deactivated`, written before the set changes, so it
//! survives a restart; activation deletes the row) and is handed to the
//! directory's pick, which skips them (running requests finish). When no escrow of the model
//! can take a request → 503 that says why: `no_active_escrow` when every one is deactivated,
//! else `no_escrow_available` naming each escrow's refusal.

use std::collections::{BTreeMap, BTreeSet};

use actix_web::{web, HttpResponse};
use devshard_actors::directory::{DirectoryError, ListParticipants, PickEscrow, PickedEscrow};
use serde_json::json;
use slog::info;

use super::error::ApiError;
use crate::{
    escrows,
    state::{AppState, ACTOR_TIMEOUT, NS_DEACTIVATED},
};

pub use crate::state::Deactivated;

fn deactivated(state: &AppState) -> BTreeSet<String> {
    state
        .deactivated
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// What a new request asks of an escrow (admission, see `directory/pick.rs`).
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub model: &'a str,
    pub request_id: &'a str,
    pub input_bytes: u64,
    pub max_tokens: u64,
    /// Escrows that already refused this request because they closed (`http/placement.rs`).
    pub closed: &'a [String],
    /// Relaxed PoC: the participants whose hosts may serve it (`http/gate.rs`).
    pub only_hosts:
        Option<&'a std::sync::Arc<BTreeSet<devshard_actors::protocol::crypto::Address>>>,
}

/// The escrow for a new request: the pick over the directory's published board among the
/// escrows that can take it (deactivated ones and the request's closed ones excluded), on this
/// thread without a message; with none, a 503 that says why.
pub fn pick_escrow(state: &AppState, ask: Ask<'_>) -> Result<PickedEscrow, ApiError> {
    let picked = {
        let deactivated = state.deactivated.lock().unwrap_or_else(|e| e.into_inner());
        state.board.pick(&PickEscrow {
            model: ask.model,
            request_id: ask.request_id,
            input_bytes: ask.input_bytes,
            max_tokens: ask.max_tokens,
            deactivated: &deactivated,
            closed: ask.closed,
            only_hosts: ask.only_hosts.map(|o| &**o),
        })
    };
    match picked {
        Ok(p) => Ok(p),
        Err(DirectoryError::NoneQualifies { model, refusals }) => {
            for (escrow, reason) in &refusals {
                state
                    .metrics
                    .pick_refusals
                    .with_label_values(&[reason.as_str()])
                    .inc();
                info!(state.log, "escrow not picked"; "stage" => "escrow_not_picked",
                    "escrow" => escrow, "reason" => *reason, "model" => &model);
            }
            let rotation = state.rotation.enabled_for(&model);
            Err(ApiError::NoEscrow {
                model,
                refusals,
                rotation,
            })
        }
        Err(e) => Err(e.into()),
    }
}

async fn set_active(state: &AppState, id: String, active: bool) -> Result<HttpResponse, ApiError> {
    if escrows::stored_info(&state.store, &id)?.is_none() {
        return Err(ApiError::NotFound(format!("escrow {id} is not registered")));
    }
    // Durable before visible: the change survives a restart before any request sees it.
    let ack = if active {
        state.store.delete(NS_DEACTIVATED, &id)
    } else {
        let at = json!({"deactivated_at_ms": state.clock.now_ms()});
        state.store.put(NS_DEACTIVATED, &id, at)
    };
    ack.await
        .map_err(|e| ApiError::Directory(DirectoryError::Store(e)))?;
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
