//! Admin routes under `/v1/admin`, behind the admin bearer key ([`require_admin`]): with no key
//! configured every admin path answers 404 (the surface is off); a missing or wrong key → 401.
//! Keys are compared in constant time.
//!
//! - `POST /v1/admin/escrows` `{"escrow_id":"42","model"?:"…","protocol"?:"v4.1",
//!   "key_file"?|"key_env"?:"…"}` → 201 with the registered escrow (200 when it was registered
//!   already); an unsupported `protocol` → 400; a key that cannot be read, or that did not
//!   create the escrow → 400 (`escrow_key_unreadable`, `escrow_creator_mismatch`);
//! - `POST /v1/admin/escrows` `{"escrow_id":"42","adopt":true,…}` → 201, the escrow adopted
//!   from its hosts' diffs ([`super::escrow_adopt`]);
//! - `POST /v1/admin/escrows` `{"model":"…","amount":A}` → creates the escrow on chain first
//!   ([`super::escrow_create`]);
//! - `GET /v1/admin/escrows` → every registered escrow with a live snapshot;
//! - `GET /v1/admin/escrows/{id}`; `DELETE` of it is in [`super::escrow_delete`].

use actix_web::{
    body::{BoxBody, MessageBody},
    dev::{ServiceRequest, ServiceResponse},
    middleware::Next,
    web, Error, HttpRequest, HttpResponse, ResponseError,
};
use devshard_actors::escrow::key::KeySource;
use serde::Deserialize;
use serde_json::json;
use slog::info;

use super::{bearer, error::ApiError, key_matches, read_body};
use crate::{
    chain::types::de_id,
    escrows,
    state::{AppState, ACTOR_TIMEOUT},
};

/// Largest admin request body.
pub const ADMIN_BODY_LIMIT: usize = 64 * 1024;

/// Middleware of the admin scope (see the module docs).
pub async fn require_admin(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, Error> {
    let admin = req
        .app_data::<web::Data<AppState>>()
        .and_then(|s| s.auth.admin.clone());
    let verdict = match admin {
        None => Err(ApiError::NotFound(format!(
            "no route for {} {}",
            req.method(),
            req.path()
        ))),
        Some(key) => match bearer(req.request()) {
            Some(token) if key_matches(token, [key.expose()]) => Ok(()),
            _ => Err(ApiError::Unauthorized("Invalid admin API key.")),
        },
    };
    match verdict {
        Ok(()) => next
            .call(req)
            .await
            .map(ServiceResponse::map_into_boxed_body),
        Err(e) => Ok(req.into_response(e.error_response())),
    }
}

/// Body of `POST /v1/admin/escrows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddEscrowBody {
    #[serde(deserialize_with = "de_id")]
    escrow_id: String,
    #[serde(default)]
    model: Option<String>,
    /// Protocol version of the escrow (`v2`, `v4.1`); absent = the configured default.
    #[serde(default)]
    protocol: Option<String>,
    /// The escrow's own signing key: a file, or an environment variable, holding its hex secret
    /// (absent: the gateway key). Only the reference is stored; the key is never returned.
    #[serde(default)]
    key_file: Option<String>,
    #[serde(default)]
    key_env: Option<String>,
}

/// `POST /v1/admin/escrows`.
pub async fn add_escrow(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let raw = read_body(&req, payload, ADMIN_BODY_LIMIT).await?;
    if super::escrow_adopt::is_adoption(&raw) {
        return super::escrow_adopt::adopt(&state, &raw).await;
    }
    if super::escrow_create::is_creation(&raw) {
        return super::escrow_create::create(&state, &raw).await;
    }
    let body: AddEscrowBody = serde_json::from_slice(&raw).map_err(|e| ApiError::BadRequest {
        message: format!("expected {{\"escrow_id\": \"<id>\", \"model\"?: \"<model>\", \"protocol\"?: \"v2|v4.1\", \"key_file\"?: \"<path>\", \"key_env\"?: \"<VAR>\"}}: {e}"),
        param: Some("escrow_id"),
        code: "invalid_value",
    })?;
    let key = KeySource::from_fields(body.key_file.as_deref(), body.key_env.as_deref())
        .map_err(|m| ApiError::invalid("key_file", "invalid_value", m))?;
    let r = escrows::register(
        &state.chain,
        &state.directory,
        &state.store,
        &state.signer,
        &state.polling,
        &body.escrow_id,
        body.model.as_deref(),
        body.protocol.as_deref(),
        key,
    )
    .await?;
    info!(state.log, "escrow registered by an admin"; "stage" => "escrow_registration",
        "escrow" => &r.info.escrow_id, "created" => r.created);
    let status = escrows::statuses(&state.directory).await?;
    let s = status.iter().find(|e| e.id == r.info.escrow_id);
    let summary = escrows::summary(&state.directory, &r.info, s).await;
    Ok(if r.created {
        HttpResponse::Created().json(summary)
    } else {
        HttpResponse::Ok().json(summary)
    })
}

/// `GET /v1/admin/escrows`.
pub async fn list_escrows(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let statuses = escrows::statuses(&state.directory).await?;
    let mut out = Vec::with_capacity(statuses.len());
    for s in &statuses {
        if let Some(info) = escrows::stored_info(&state.store, &s.id)? {
            out.push(escrows::summary(&state.directory, &info, Some(s)).await);
        }
    }
    Ok(HttpResponse::Ok().json(json!({"object": "list", "data": out})))
}

/// `GET /v1/admin/escrows/{id}`.
pub async fn get_escrow(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let statuses = escrows::statuses(&state.directory).await?;
    let status = statuses.iter().find(|e| e.id == id);
    let info = match (status, escrows::stored_info(&state.store, &id)?) {
        (Some(_), Some(info)) => info,
        _ => return Err(ApiError::NotFound(format!("escrow {id} is not registered"))),
    };
    Ok(HttpResponse::Ok().json(escrows::summary(&state.directory, &info, status).await))
}

/// How long a sync of every host may take before the admin call gives up waiting.
const SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `POST /v1/admin/escrows/{id}/sync`: sequence pending txs and catch every host up to the
/// escrow's nonce (upstream `SyncHosts`); answers the nonce, root and each host's sync nonce.
pub async fn sync_escrow(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    use devshard_actors::{
        directory::GetEscrow,
        escrow::messages::{GetSnapshot, SyncHosts},
    };
    let id = path.into_inner();
    let addr = state
        .directory
        .send(GetEscrow {
            escrow_id: id.clone(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("escrow {id} is not running")))?;
    let syncs = addr.send(SyncHosts).timeout(SYNC_TIMEOUT).await?;
    let snap = addr.send(GetSnapshot).timeout(ACTOR_TIMEOUT).await?;
    let hosts: serde_json::Map<String, serde_json::Value> = syncs
        .into_iter()
        .map(|(a, n)| (a.to_string(), json!(n)))
        .collect();
    info!(state.log, "hosts synced by an admin"; "stage" => "sync_hosts", "escrow" => &id);
    Ok(HttpResponse::Ok().json(json!({
        "escrow_id": id,
        "nonce": snap.nonce,
        "state_root": snap.state_root,
        "host_sync": hosts,
    })))
}

/// `POST /v1/admin/escrows/{id}/participants/{address}/repair`: run a repair tick now (404 when
/// that participant is not under repair in that escrow).
pub async fn trigger_repair(
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    use devshard_actors::{
        directory::GetEscrow, escrow::messages::TriggerRepair, protocol::crypto::Address,
    };
    let (id, address) = path.into_inner();
    let participant = Address::parse(&address)
        .map_err(|e| ApiError::invalid("address", "invalid_value", e.to_string()))?;
    let addr = state
        .directory
        .send(GetEscrow {
            escrow_id: id.clone(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("escrow {id} is not running")))?;
    let triggered = addr
        .send(TriggerRepair { participant })
        .timeout(ACTOR_TIMEOUT)
        .await?;
    if !triggered {
        return Err(ApiError::NotFound(format!(
            "{address} is not under repair in escrow {id}"
        )));
    }
    info!(state.log, "repair tick requested by an admin"; "stage" => "repair_triggered",
        "escrow" => &id, "participant" => &address);
    Ok(HttpResponse::Accepted()
        .json(json!({"escrow_id": id, "participant_key": address, "triggered": true})))
}
