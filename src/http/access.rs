//! Per-model access control of `POST /v1/chat/completions` (see `config::access`).
//!
//! [`identify`] runs first (before the body is read): a bearer that is neither an API key nor
//! the admin key → 401 `invalid_api_key`; no bearer while no model is `open` → 401 (every model
//! would refuse it). [`authorize`] runs after model resolution: `api_key` needs an API key or
//! the admin key (401 without a key), `admin_only` the admin key (403 `model_access_denied`
//! for an API key, 401 without a key).

use actix_web::{http::StatusCode, HttpRequest, HttpResponse};
use serde_json::json;

use super::{bearer, error::ApiError, key_matches};
use crate::{config::AccessMode, state::AppState};

/// `code` of a 403 for a model the caller's key may not use.
pub const CODE_ACCESS_DENIED: &str = "model_access_denied";

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Anonymous,
    /// The `i`-th key of `DEVSHARD_API_KEYS` (the index, never the key, identifies it).
    ApiKey(usize),
    Admin,
}

impl Caller {
    /// Stable label (fingerprints, the request table): `anonymous`, `api_key#<i>`, `admin`.
    pub fn label(&self) -> String {
        match self {
            Caller::Anonymous => "anonymous".into(),
            Caller::ApiKey(i) => format!("api_key#{i}"),
            Caller::Admin => "admin".into(),
        }
    }
}

/// The caller of `req` (see the module docs).
pub fn identify(req: &HttpRequest, state: &AppState) -> Result<Caller, ApiError> {
    let Some(token) = bearer(req) else {
        if state.access.any_open() {
            return Ok(Caller::Anonymous);
        }
        return Err(ApiError::Unauthorized(
            "missing API key: send Authorization: Bearer <key>",
        ));
    };
    if let Some(admin) = &state.auth.admin {
        if key_matches(token, [admin.expose()]) {
            return Ok(Caller::Admin);
        }
    }
    let mut hit = None;
    for (i, k) in state.auth.api_keys.iter().enumerate() {
        if key_matches(token, [k.expose()]) && hit.is_none() {
            hit = Some(i);
        }
    }
    hit.map(Caller::ApiKey)
        .ok_or(ApiError::Unauthorized("invalid API key"))
}

/// `Err(answer)` when `caller` may not use `model` (see the module docs).
pub fn authorize(caller: &Caller, model: &str, state: &AppState) -> Result<(), Box<HttpResponse>> {
    use actix_web::ResponseError;
    let mode = state.access.mode(model);
    let allowed = match (mode, caller) {
        (AccessMode::Open, _) | (_, Caller::Admin) => true,
        (AccessMode::ApiKey, Caller::ApiKey(_)) => true,
        (_, Caller::Anonymous) => {
            let e = ApiError::Unauthorized("missing API key: send Authorization: Bearer <key>");
            return Err(Box::new(e.error_response()));
        }
        (AccessMode::AdminOnly, Caller::ApiKey(_)) => false,
    };
    if allowed {
        return Ok(());
    }
    let message = format!(
        "model `{model}` has access mode `{}`: this key may not use it",
        mode.as_str()
    );
    Err(Box::new(HttpResponse::build(StatusCode::FORBIDDEN).json(
        json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "model",
            "code": CODE_ACCESS_DENIED,
        }}),
    )))
}
