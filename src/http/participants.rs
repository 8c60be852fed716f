//! Participant health under `/v1/admin/participants` (docs/health.md §2), behind the admin key:
//!
//! - `GET /v1/admin/participants` → every known participant as `{participant_key, state, strikes,
//!   level, ejected_until, probation_remaining, escrows, perf, outcomes}`;
//! - `POST /v1/admin/participants/unquarantine` — end an ejection and start probation;
//! - `POST /v1/admin/participants/forget` — clear everything (strikes, level, probation, perf) and
//!   delete the persisted record;
//! - `POST /v1/admin/participants/eject` — eject now for `base_ejection_ms` (an operator marking a
//!   host bad by hand).
//!
//! The POST bodies are `{"participant_key": "gonka1…"}` or `{"all": true}`. Every call is
//! idempotent and persisted before it answers; on PostgreSQL the other replicas are then told
//! (`crate::replicas::events`) and reload the participant's health within a second.

use std::sync::Arc;

use actix_web::{web, HttpRequest, HttpResponse};
use devshard_actors::{
    directory::GetHealthSettings,
    directory::{AdminParticipants, ListParticipants, ParticipantOp},
    participant::messages::ParticipantView,
    policy::{health::HealthStatus, perf, settings::HealthSettings},
    protocol::crypto::Address,
};
use serde::Deserialize;
use serde_json::{json, Value};
use slog::info;

use super::{admin::ADMIN_BODY_LIMIT, error::ApiError, read_body};
use crate::{
    replicas::events::EventKind,
    state::{AppState, ACTOR_TIMEOUT},
};

/// Body of the participant admin POSTs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    #[serde(default)]
    participant_key: Option<String>,
    #[serde(default)]
    all: bool,
}

/// The admin listing shape of one participant.
pub fn participant_json(v: &ParticipantView, settings: &HealthSettings, now_ms: i64) -> Value {
    let h = &v.record.health;
    let (ejected_until, probation_remaining) = match h.state {
        HealthStatus::Ejected { until_ms, .. } => (Some(until_ms), None),
        HealthStatus::Probation { remaining, .. } => (None, Some(remaining)),
        _ => (None, None),
    };
    let p = &v.record.perf;
    json!({
        "participant_key": v.address,
        "state": v.state,
        "strikes": v.strikes,
        "level": h.level,
        "ejected_until": ejected_until,
        "probation_remaining": probation_remaining,
        "ejections": h.ejections,
        "routable": v.routable,
        "escrows": v.record.escrows,
        "outcomes": v.record.outcomes,
        "recent_strikes": v.record.recent_strikes,
        "perf": {
            "unresponsive": v.unresponsive,
            "samples": p.decayed_samples(settings, now_ms),
            "failures": p.decayed_failures(settings, now_ms),
            "success_rate": p.success_rate(settings, now_ms),
            "receipt_p95_ms": p.expected_receipt_p95_ms(settings, now_ms),
            "first_token_ms": p.expected_first_token_ms(settings, now_ms, 1024),
            "tokens_per_s": p.expected_tokens_per_s(),
            "is_unresponsive": perf::is_unresponsive(p, settings, now_ms),
        },
    })
}

/// `GET /v1/admin/participants`.
pub async fn list(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let views = state
        .directory
        .send(ListParticipants)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let settings = state
        .directory
        .send(GetHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let now = state.clock.now_ms();
    let data: Vec<Value> = views
        .iter()
        .map(|v| participant_json(v, &settings, now))
        .collect();
    Ok(HttpResponse::Ok().json(json!({"object": "list", "data": data})))
}

async fn admin_op(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    op: ParticipantOp,
) -> Result<HttpResponse, ApiError> {
    let body = read_body(&req, payload, ADMIN_BODY_LIMIT).await?;
    let target: Target = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(
            "participant_key",
            "invalid_json",
            format!("invalid body: {e}"),
        )
    })?;
    let address =
        match (target.participant_key, target.all) {
            (Some(_), true) => {
                return Err(ApiError::invalid(
                    "all",
                    "invalid_value",
                    "give participant_key or all, not both",
                ))
            }
            (None, false) => {
                return Err(ApiError::invalid(
                    "participant_key",
                    "missing_required_parameter",
                    "give {\"participant_key\": \"gonka1…\"} or {\"all\": true}",
                ))
            }
            (Some(k), false) => Some(Address::parse(&k).map_err(|e| {
                ApiError::invalid("participant_key", "invalid_value", e.to_string())
            })?),
            (None, true) => None,
        };
    let target = address.as_ref().map(ToString::to_string);
    let who = target.clone().unwrap_or_else(|| "all".to_string());
    let views: Vec<Arc<ParticipantView>> = state
        .directory
        .send(AdminParticipants { address, op })
        .timeout(ACTOR_TIMEOUT)
        .await??;
    // Persisted: the other replicas may reload it now.
    if let Some(replicas) = &state.replicas {
        replicas.publish(EventKind::from(op), target).await;
    }
    info!(state.log, "participant admin call"; "stage" => "participant_admin",
        "op" => format!("{op:?}").to_lowercase(), "participant" => who);
    let settings = state
        .directory
        .send(GetHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let now = state.clock.now_ms();
    let data: Vec<Value> = views
        .iter()
        .map(|v| participant_json(v, &settings, now))
        .collect();
    Ok(HttpResponse::Ok().json(json!({"object": "list", "data": data})))
}

/// `POST /v1/admin/participants/unquarantine`.
pub async fn unquarantine(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    admin_op(req, payload, state, ParticipantOp::Unquarantine).await
}

/// `POST /v1/admin/participants/forget`.
pub async fn forget(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    admin_op(req, payload, state, ParticipantOp::Forget).await
}

/// `POST /v1/admin/participants/eject`.
pub async fn eject(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    admin_op(req, payload, state, ParticipantOp::ForceEject).await
}
