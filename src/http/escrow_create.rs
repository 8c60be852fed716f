//! `POST /v1/admin/escrows {"model": M, "amount": A}` — create an escrow on chain — and
//! `GET /v1/admin/rotation` (admin key), docs/lifecycle.md §4.
//!
//! Creation answers synchronously within a deadline: the intent is persisted, the tx broadcast,
//! and its commit awaited for up to [`CREATE_WAIT_MS`] (45 s; the body's optional `wait_ms`
//! shortens it, `0` answers after the first look-up):
//! - committed and registered → **201** with the escrow (as `GET /v1/admin/escrows/{id}`) and
//!   its `tx_hash`;
//! - refused or failed on chain → **502** `escrow_creation_failed` with the chain's log;
//! - not committed yet → **202** with the open intent (`object: "escrow.create_intent"`); the
//!   rotation tick keeps reconciling it, and `GET /v1/admin/rotation` lists it under `intents`
//!   until it is registered (then the escrow is in `GET /v1/admin/escrows`) or cleared.
//!
//! `GET /v1/admin/rotation` → the rotation's last check: per model the target, the deposit of
//! today against the cap, the decision, the back-off and each escrow's role (`active`, `low`,
//! `retiring`, `settled`) with what it can still spend; and every open creation intent.

use actix_web::{web, HttpResponse};
use devshard_actors::settlement::machine::CONFIRM_WINDOW_MS;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use crate::{
    escrows,
    rotation::{creator::Reconciled, intent::Origin, CreateError},
    state::AppState,
};

/// How long `POST /v1/admin/escrows` waits for the creation to commit.
pub const CREATE_WAIT_MS: i64 = CONFIRM_WINDOW_MS;

/// Body of a creation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    pub model: String,
    pub amount: u64,
    /// How long to wait for the commit (at most [`CREATE_WAIT_MS`]; 0 = answer 202 at once).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// True when a `POST /v1/admin/escrows` body asks for a creation (it names an `amount`).
pub fn is_creation(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .is_some_and(|v| v.get("amount").is_some() && v.get("escrow_id").is_none())
}

/// `POST /v1/admin/escrows` with `{"model", "amount"}` (see the module docs).
pub async fn create(state: &AppState, raw: &[u8]) -> Result<HttpResponse, ApiError> {
    let body: CreateBody = serde_json::from_slice(raw).map_err(|e| ApiError::BadRequest {
        message: format!(
            "expected {{\"model\": \"<model>\", \"amount\": <ngonka>}} to create an escrow: {e}"
        ),
        param: Some("amount"),
        code: "invalid_value",
    })?;
    let model = body.model.trim();
    if model.is_empty() {
        return Err(ApiError::invalid(
            "model",
            "invalid_value",
            "`model` must name a model",
        ));
    }
    if body.amount == 0 {
        return Err(ApiError::invalid(
            "amount",
            "invalid_value",
            "`amount` must be > 0",
        ));
    }
    let creator = &state.rotation.creator;
    let intent = creator.create(model, body.amount, Origin::Admin).await?;
    let wait = body.wait_ms.map_or(CREATE_WAIT_MS, |w| {
        i64::try_from(w).unwrap_or(i64::MAX).min(CREATE_WAIT_MS)
    });
    let deadline = state.clock.now_ms() + wait;
    match creator.wait(&intent.tx_hash, deadline).await {
        Reconciled::Registered(id) => {
            let info = escrows::stored_info(&state.store, &id)?
                .ok_or_else(|| ApiError::Internal(format!("escrow {id} has no record")))?;
            let statuses = escrows::statuses(&state.directory).await?;
            let s = statuses.iter().find(|e| e.id == id);
            let mut summary = escrows::summary(&state.directory, &info, s).await;
            if let Some(o) = summary.as_object_mut() {
                o.insert("tx_hash".into(), json!(intent.tx_hash));
            }
            Ok(HttpResponse::Created().json(summary))
        }
        Reconciled::Cleared { why, log } => {
            Err(CreateError::Failed(format!("{} ({log})", why.label())).into())
        }
        Reconciled::Pending(open) => Ok(HttpResponse::Accepted().json(json!({
            "object": "escrow.create_intent",
            "tx_hash": open.tx_hash,
            "model": open.model,
            "amount": open.amount,
            "created_at_ms": open.created_at_ms,
            "state": "pending",
            "last_error": open.last_error,
            "see": "/v1/admin/rotation",
        }))),
    }
}

/// `GET /v1/admin/rotation`.
pub async fn rotation(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let view = state.rotation.view().await.ok_or(ApiError::ActorTimeout)?;
    Ok(HttpResponse::Ok().json(json!({
        "object": "rotation",
        "settings": state.rotation.settings(),
        "view": view,
    })))
}

/// The `rotation` entry of `GET /v1/debug/actors`: the rotation actor's last check.
pub async fn debug_entries(state: &AppState) -> Vec<serde_json::Value> {
    let view = state.rotation.view().await;
    let alive = view.is_some();
    let v = view.unwrap_or_default();
    let status = if !alive {
        "unresponsive"
    } else if v.enabled {
        "rotating"
    } else {
        "off"
    };
    vec![
        json!({"kind": "rotation", "id": "rotation", "state": status, "alive": alive,
        "detail": v}),
    ]
}
