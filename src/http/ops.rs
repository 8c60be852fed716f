//! Operational routes: liveness, readiness, Prometheus metrics and the OpenAI model list.
//!
//! - `GET /healthz`: the process (and its root actor, the directory) is alive → 200.
//! - `GET /readyz`: the store answers a read and at least one escrow actor is alive → 200;
//!   otherwise 503 with the reason. On PostgreSQL first: the database answers, this replica ran
//!   its first ownership round and its heartbeat and leases are fresh (`readiness.rs`), else 503
//!   with `code` and `reason`; a replica there is ready even when it owns no escrow (the
//!   escrows run on the other replicas).
//! - `GET /metrics`: Prometheus text exposition of the process registry.
//! - `GET /v1/models`: the models of registered, healthy escrows (OpenAI list shape); on
//!   PostgreSQL also those of every other replica's live escrows (they are forwarded there).

use actix_web::{http::header, web, HttpResponse, ResponseError};
use devshard_actors::{directory::GetEscrowStatuses, store::ns};
use serde_json::json;

use super::error::ApiError;
use crate::{metrics, replicas::route, state::AppState};

/// `Content-Type` of the Prometheus text format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Record read by the readiness probe (its absence is fine; a failing read is not).
const READINESS_PROBE_KEY: &str = "settings";
/// `owned_by` of every model (upstream value).
const MODEL_OWNER: &str = "gonka";

fn unavailable(reason: String) -> HttpResponse {
    HttpResponse::ServiceUnavailable()
        .insert_header((header::RETRY_AFTER, "1"))
        .json(json!({"status": "unavailable", "reason": reason}))
}

/// `GET /healthz`.
pub async fn healthz(state: web::Data<AppState>) -> HttpResponse {
    if state.directory.connected() {
        HttpResponse::Ok().json(json!({"status": "ok"}))
    } else {
        unavailable("the directory actor has stopped".into())
    }
}

/// `GET /readyz`.
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if let Some(stage) = &state.replica_readiness {
        if let Err(e) = stage.check().await {
            return HttpResponse::ServiceUnavailable()
                .insert_header((header::RETRY_AFTER, "1"))
                .json(json!({"status": "unavailable", "code": e.code(), "reason": e.to_string()}));
        }
    }
    if let Err(e) = state.store.get(ns::SETTINGS, READINESS_PROBE_KEY) {
        return unavailable(format!("the store is not usable: {e}"));
    }
    let escrows = match state
        .directory
        .send(GetEscrowStatuses)
        .timeout(crate::state::ACTOR_TIMEOUT)
        .await
    {
        Ok(s) => s,
        Err(e) => return unavailable(format!("the directory did not answer: {e}")),
    };
    let alive = escrows.iter().filter(|e| e.alive && !e.failed).count();
    if alive == 0 && state.replica_readiness.is_none() {
        return unavailable(format!(
            "no escrow actor is alive ({} registered)",
            escrows.len()
        ));
    }
    HttpResponse::Ok().json(json!({
        "status": "ready",
        "escrows_registered": escrows.len(),
        "escrows_alive": alive,
    }))
}

/// `GET /metrics`.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    match metrics::render(&state.registry) {
        Ok(text) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE))
            .body(text),
        Err(e) => ApiError::Internal(format!("encoding metrics: {e}")).error_response(),
    }
}

/// `GET /v1/models`.
pub async fn models(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let board = state.board.load();
    let models = match &state.replicas {
        Some(replicas) => route::all_models(&board.models, &replicas.remote().await),
        None => board.models.clone(),
    };
    let cap = state.limits.chat.max_tokens_cap;
    let data: Vec<_> = models
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "object": "model",
                "created": state.started_at_s,
                "owned_by": MODEL_OWNER,
                "max_completion_tokens": cap,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({"object": "list", "data": data})))
}
