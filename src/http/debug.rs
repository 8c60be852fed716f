//! Actor-level inspection under `/v1/debug` (admin key):
//!
//! - `GET /v1/debug/actors[?kind=escrow|participant|race|repair|chain_poller|directory][&state=…]`
//!   lists every live actor with its kind, id, a state summary, whether it is alive, restarts and
//!   races in flight; each actor is asked with a short deadline and reported as `unresponsive`
//!   instead of being waited for.
//! - `GET /v1/debug/actors/{kind}/{id}`: one actor's full state (escrow: nonce, phase, root,
//!   per-host sync nonce, pending txs, signatures, attempts in flight, pending finishes and
//!   timeouts, repairs; participant: health state, decayed strikes, level, deadlines, perf).
//! - `GET /v1/debug/escrows/{id}`: the escrow's session and the state of each of its repairs
//!   (blocked since, attempts, last result, next tick).
//!
//! No secret (private key, API keys) is in any of these answers.

use std::time::Duration;

use actix_web::{web, HttpRequest, HttpResponse};
use devshard_actors::{
    directory::{ActorKind, GetEscrow, GetHealthSettings, GetStatus, ListParticipants},
    escrow::messages::{GetRepairStates, GetSnapshot},
};
use serde_json::{json, Value};

use super::{error::ApiError, participants::participant_json};
use crate::app::{AppState, ACTOR_TIMEOUT};

/// How long one actor may take to answer a listing before it is reported `unresponsive`.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

fn query_param<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.query_string().split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then_some(v)
    })
}

async fn escrow_detail(state: &AppState, id: &str) -> Result<Value, ApiError> {
    let addr = state
        .directory
        .send(GetEscrow {
            escrow_id: id.to_string(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("escrow {id} is not running")))?;
    let snapshot = match addr.send(GetSnapshot).timeout(PROBE_TIMEOUT).await {
        Ok(s) => serde_json::to_value(s).unwrap_or(Value::Null),
        Err(_) => json!({"state": "unresponsive"}),
    };
    let repairs = match addr.send(GetRepairStates).timeout(PROBE_TIMEOUT).await {
        Ok(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        Err(_) => json!("unresponsive"),
    };
    Ok(json!({"kind": "escrow", "id": id, "state": snapshot, "repairs": repairs}))
}

/// Every actor, as `{kind, id, state, alive, restarts, in_flight, detail}`.
async fn all_actors(state: &AppState) -> Result<Vec<Value>, ApiError> {
    let status = state
        .directory
        .send(GetStatus)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let mut out = vec![
        json!({"kind": "directory", "id": "directory", "state": "running", "alive": true,
        "escrows": status.entities.iter().filter(|e| e.kind == ActorKind::Escrow).count(),
        "races_in_flight": status.races.len()}),
    ];
    for e in status
        .entities
        .iter()
        .filter(|e| e.kind == ActorKind::Escrow)
    {
        let detail = escrow_detail(state, &e.id)
            .await
            .unwrap_or(json!({"state": "not running"}));
        let summary = if e.failed {
            "failed"
        } else if e.alive {
            "active"
        } else {
            "restarting"
        };
        if let Some(repairs) = detail["repairs"].as_array() {
            for r in repairs {
                out.push(json!({"kind": "repair", "id": format!("{}/{}", e.id, r["participant"].as_str().unwrap_or("")),
                    "state": if r["gave_up"].as_bool() == Some(true) { "gave_up" } else { "repairing" },
                    "alive": true, "detail": r}));
            }
        }
        out.push(
            json!({"kind": "escrow", "id": e.id, "state": summary, "alive": e.alive,
            "restarts": e.restarts, "in_flight": e.in_flight, "detail": detail["state"]}),
        );
    }
    let settings = state
        .directory
        .send(GetHealthSettings)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let now = state.clock.now_ms();
    let views = state
        .directory
        .send(ListParticipants)
        .timeout(ACTOR_TIMEOUT)
        .await
        .unwrap_or_default();
    for e in status
        .entities
        .iter()
        .filter(|e| e.kind == ActorKind::Participant)
    {
        let view = views.iter().find(|v| v.address.as_str() == e.id);
        out.push(json!({"kind": "participant", "id": e.id,
            "state": view.map_or("unresponsive", |v| v.state), "alive": e.alive, "restarts": e.restarts,
            "detail": view.map(|v| participant_json(v, &settings, now))}));
    }
    for (race_id, escrow, request) in &status.races {
        out.push(
            json!({"kind": "race", "id": race_id.to_string(), "state": "racing", "alive": true,
            "detail": {"escrow": escrow, "request_id": request}}),
        );
    }
    if let Some(poller) = state.polling.poller() {
        let view = poller
            .send(devshard_actors::chain::GetSnapshot)
            .timeout(PROBE_TIMEOUT)
            .await;
        let detail = view.ok().and_then(|v| serde_json::to_value(&*v).ok());
        out.push(json!({"kind": "chain_poller", "id": "public_api",
            "state": if detail.is_some() { "polling" } else { "unresponsive" }, "alive": true, "detail": detail}));
    }
    Ok(out)
}

/// `GET /v1/debug/actors`.
pub async fn actors(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let kind = query_param(&req, "kind");
    let wanted_state = query_param(&req, "state");
    let data: Vec<Value> = all_actors(&state)
        .await?
        .into_iter()
        .filter(|a| kind.is_none_or(|k| a["kind"] == k))
        .filter(|a| wanted_state.is_none_or(|s| a["state"] == s))
        .collect();
    Ok(HttpResponse::Ok().json(json!({"object": "list", "data": data})))
}

/// `GET /v1/debug/actors/{kind}/{id}`.
pub async fn actor(
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let (kind, id) = path.into_inner();
    if kind == "escrow" {
        return Ok(HttpResponse::Ok().json(escrow_detail(&state, &id).await?));
    }
    let found = all_actors(&state)
        .await?
        .into_iter()
        .find(|a| a["kind"] == kind.as_str() && a["id"] == id.as_str())
        .ok_or_else(|| ApiError::NotFound(format!("no {kind} actor with id {id}")))?;
    Ok(HttpResponse::Ok().json(found))
}

/// `GET /v1/debug/escrows/{id}`.
pub async fn escrow(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(escrow_detail(&state, &path.into_inner()).await?))
}
