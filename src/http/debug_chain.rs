//! `GET /v1/debug/chain` and `GET /v1/debug/series` (admin key): the chain poller's view with
//! what a new request for each served model gets now, and the UI's 15-minute series.

use actix_web::{web, HttpResponse};
use devshard_actors::chain::{admission, GetSnapshot as GetChainSnapshot};
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::state::{series, AppState, ACTOR_TIMEOUT};

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
    let view = poller.send(GetChainSnapshot).timeout(ACTOR_TIMEOUT).await?;
    let board = state.board.load();
    let models = &board.models;
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

/// `GET /v1/debug/series` (admin): `{interval_ms, capacity, points[]}`.
pub async fn series(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({
        "interval_ms": series::SAMPLE_INTERVAL.as_millis() as u64,
        "capacity": series::CAPACITY,
        "points": state.series.points(),
    }))
}
