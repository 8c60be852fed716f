//! Phase gating of new chat requests, and `GET /v1/debug/chain`.
//!
//! [`admit`] runs in `POST /v1/chat/completions` after the body is validated and the model is
//! resolved, before the concurrency limit, the escrow choice and the race: a refused request
//! touches no escrow and consumes no nonce. It reads the view the chain poller last pushed
//! (`AppState::polling`), never the network. Attempts already running are not affected.
//!
//! | admission | answer |
//! |---|---|
//! | no public API configured, no snapshot yet, stale snapshot, inference | served |
//! | PoC, `poc_request_mode = off` | 503 `poc_in_progress` + `Retry-After` (expected end of PoC) |
//! | PoC, `relaxed`, some participant preserved for the model | served (`stage=poc_relaxed`; routing only to the preserved participants is future work) |
//! | PoC, `relaxed`, nobody preserved or no fresh participants | 503 as with `off` |

use actix_web::{web, HttpResponse};
use devshard_actors::{
    chain::{admission, Admission, GetSnapshot},
    directory::ListModels,
};
use serde_json::{Map, Value};
use slog::{info, Logger};

use super::error::ApiError;
use crate::app::{AppState, ACTOR_TIMEOUT};

/// The refusal when a new request for `model` must be refused now (see the module docs; its
/// status and body come from [`ApiError::PhaseRefused`]).
pub fn admit(state: &AppState, model: &str, log: &Logger) -> Option<ApiError> {
    let view = state.polling.view()?;
    let mode = state.polling.settings().poc_request_mode;
    match admission(&view, mode, model, state.clock.now_ms()) {
        Admission::Serve => None,
        Admission::ServeOnly { preserved, phase } => {
            info!(log, "PoC in progress; relaxed mode serves the request";
                "stage" => "poc_relaxed", "phase" => ?phase, "model" => model,
                "preserved" => preserved.len());
            None
        }
        Admission::Refuse {
            retry_after_s,
            phase,
            message,
        } => {
            let refused = ApiError::PhaseRefused {
                retry_after_s,
                message,
            };
            info!(log, "request refused during PoC"; "stage" => "poc_refused",
                "phase" => ?phase, "model" => model, "retry_after_s" => retry_after_s,
                "status" => refused.parts().status);
            Some(refused)
        }
    }
}

/// `GET /v1/debug/chain` (admin): the poller's `ChainView` (snapshots with their ages and
/// staleness, each endpoint's last status, next poll and wait reason, each host's budget and
/// back-off, the settings), plus `admission`: what a new request for each served model gets now.
pub async fn debug_chain(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let Some(poller) = state.polling.poller() else {
        return Err(ApiError::NotFound(
            "chain polling is off: no public_api_url (DEVSHARD_PUBLIC_API_URL) is configured"
                .into(),
        ));
    };
    let view = poller.send(GetSnapshot).timeout(ACTOR_TIMEOUT).await?;
    let models = state
        .directory
        .send(ListModels)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let mode = state.polling.settings().poc_request_mode;
    let now = state.clock.now_ms();
    let per_model: Map<String, Value> = models
        .iter()
        .map(|m| {
            let a = serde_json::to_value(admission(&view, mode, m, now)).unwrap_or(Value::Null);
            (m.clone(), a)
        })
        .collect();
    let mut body = serde_json::to_value(&*view).map_err(|e| ApiError::Internal(e.to_string()))?;
    if let Value::Object(o) = &mut body {
        o.insert("admission".into(), Value::Object(per_model));
    }
    Ok(HttpResponse::Ok().json(body))
}
