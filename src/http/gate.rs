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

use actix_web::{
    http::{header, StatusCode},
    web, HttpResponse,
};
use devshard_actors::{
    chain::{admission, Admission, GetSnapshot},
    directory::ListModels,
};
use serde_json::{json, Map, Value};
use slog::{info, Logger};

use super::error::ApiError;
use crate::app::{AppState, ACTOR_TIMEOUT};

/// `code` of a request refused during PoC.
pub const CODE_POC: &str = "poc_in_progress";

/// The answer of a refused request: 503, `Retry-After`, OpenAI error body.
pub fn refusal(retry_after_s: u64, message: &str) -> HttpResponse {
    HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
        .insert_header((header::RETRY_AFTER, retry_after_s.to_string()))
        .json(json!({"error": {
            "message": message,
            "type": "service_unavailable",
            "param": null,
            "code": CODE_POC,
        }}))
}

/// `Some(503)` when a new request for `model` must be refused now (see the module docs).
pub fn admit(state: &AppState, model: &str, log: &Logger) -> Option<HttpResponse> {
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
            info!(log, "request refused during PoC"; "stage" => "poc_refused",
                "phase" => ?phase, "model" => model, "retry_after_s" => retry_after_s,
                "status" => 503);
            Some(refusal(retry_after_s, &message))
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
