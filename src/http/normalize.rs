//! Request normalisation of `POST /v1/chat/completions` (PROTOCOL.md §6.1), as pure functions:
//! the body must be a JSON object; `messages` follows OpenAI's rules ([`super::messages`]); every
//! other key goes through the filter pipeline ([`super::filter`]: `extra_body` flattened, bounds,
//! silently dropped keys, unknown keys 400); `max_tokens` and
//! `max_completion_tokens`, when given, are positive integers within the cap (both given: both
//! become the smaller); neither given: `max_tokens` = the default. `stream` must be a boolean.
//! `model` must be a string when present. The model is chosen among the served ones and written
//! into the body, the model's forced fields are added ([`super::shaping`]), and that body — the
//! one sent upstream — is what the escrow signs as the prompt (its `prompt_hash` is over its
//! canonical JSON).

use bytes::Bytes;
use devshard_actors::protocol::canonical::prompt_hash;
use serde_json::{Map, Value};

use super::{
    error::ApiError,
    filter, messages,
    shaping::{self, Strip},
};
use crate::config::operator::ShapingConfig;

/// `max_tokens`.
pub const FIELD_MAX_TOKENS: &str = "max_tokens";
/// `max_completion_tokens` (newer OpenAI name of the same limit).
pub const FIELD_MAX_COMPLETION_TOKENS: &str = "max_completion_tokens";

pub use crate::state::ChatLimits;

/// A checked request, before the model is chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub body: Map<String, Value>,
    /// The `model` the client asked for, if any.
    pub model: Option<String>,
    /// The effective token limit.
    pub max_tokens: u64,
    pub stream: bool,
    /// Keys dropped silently by the filter pipeline.
    pub dropped: Vec<String>,
}

/// A normalised request, ready for the escrow.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalizedChat {
    pub body: Bytes,
    pub model: String,
    pub max_tokens: u64,
    pub stream: bool,
    pub prompt_hash: [u8; 32],
    /// What to take out of the answer (what the client did not ask for).
    pub strip: Strip,
    /// Keys dropped silently by the filter pipeline.
    pub dropped: Vec<String>,
}

fn token_limit(
    body: &Map<String, Value>,
    field: &'static str,
    cap: u64,
) -> Result<Option<u64>, ApiError> {
    let Some(v) = body.get(field) else {
        return Ok(None);
    };
    if v.is_null() {
        return Ok(None);
    }
    match v.as_u64() {
        Some(n) if n >= 1 && n <= cap => Ok(Some(n)),
        Some(n) if n > cap => Err(ApiError::invalid(
            field,
            "invalid_value",
            format!("`{field}` is {n}, above the maximum of {cap}"),
        )),
        _ => Err(ApiError::invalid(
            field,
            "invalid_value",
            format!("`{field}` must be a positive integer (at most {cap})"),
        )),
    }
}

/// Parses and checks the body (everything that needs no knowledge of the served models).
pub fn parse(raw: &[u8], limits: ChatLimits) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(raw).map_err(|e| ApiError::BadRequest {
        message: format!("the request body is not valid JSON: {e}"),
        param: None,
        code: "invalid_json",
    })?;
    let Value::Object(mut body) = value else {
        return Err(ApiError::BadRequest {
            message: "the request body must be a JSON object".into(),
            param: None,
            code: "invalid_json",
        });
    };
    let dropped = filter::apply(&mut body)?;
    messages::check(body.get("messages"))?;
    let cap = limits.max_tokens_cap;
    let a = token_limit(&body, FIELD_MAX_TOKENS, cap)?;
    let b = token_limit(&body, FIELD_MAX_COMPLETION_TOKENS, cap)?;
    let max_tokens = match (a, b) {
        (Some(x), Some(y)) => {
            let m = x.min(y);
            body.insert(FIELD_MAX_TOKENS.into(), Value::from(m));
            body.insert(FIELD_MAX_COMPLETION_TOKENS.into(), Value::from(m));
            m
        }
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => {
            body.remove(FIELD_MAX_COMPLETION_TOKENS);
            body.insert(
                FIELD_MAX_TOKENS.into(),
                Value::from(limits.default_max_tokens),
            );
            limits.default_max_tokens
        }
    };
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid(
                "stream",
                "invalid_value",
                "`stream` must be a boolean",
            ))
        }
    };
    let model = match body.get("model") {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => Some(s.trim().to_string()),
        Some(_) => {
            return Err(ApiError::invalid(
                "model",
                "invalid_value",
                "`model` must be a string",
            ))
        }
    };
    Ok(ChatRequest {
        body,
        model,
        max_tokens,
        stream,
        dropped,
    })
}

/// The model of a request: the requested one when served (else 404 listing the served ones);
/// none requested: the only served model, else `default` when served, else 400.
pub fn choose_model(
    requested: Option<&str>,
    served: &[String],
    default: Option<&str>,
) -> Result<String, ApiError> {
    if let Some(m) = requested {
        if served.iter().any(|s| s == m) {
            return Ok(m.to_string());
        }
        return Err(ApiError::ModelNotFound {
            model: m.to_string(),
            available: served.to_vec(),
        });
    }
    match served {
        [only] => Ok(only.clone()),
        [] => Err(ApiError::BadRequest {
            message: "no model is served at the moment (no escrow is registered)".into(),
            param: Some("model"),
            code: "model_required",
        }),
        many => default
            .filter(|d| many.iter().any(|m| m == d))
            .map(str::to_string)
            .ok_or_else(|| ApiError::BadRequest {
                message: format!("`model` is required; available models: {}", many.join(", ")),
                param: Some("model"),
                code: "model_required",
            }),
    }
}

/// Writes the model and its forced fields into the body and computes what the escrow needs.
pub fn finish(
    req: ChatRequest,
    model: String,
    shaping: &ShapingConfig,
) -> Result<NormalizedChat, ApiError> {
    let mut body = req.body;
    body.insert("model".into(), Value::String(model.clone()));
    let asked = shaping::force(&mut body, shaping.forces(&model));
    let bytes = serde_json::to_vec(&Value::Object(body))
        .map_err(|e| ApiError::Internal(format!("re-encoding the request: {e}")))?;
    let hash = prompt_hash(&bytes).map_err(|e| ApiError::BadRequest {
        message: format!("the request body has no canonical JSON form: {e}"),
        param: None,
        code: "invalid_json",
    })?;
    Ok(NormalizedChat {
        body: Bytes::from(bytes),
        model,
        max_tokens: req.max_tokens,
        stream: req.stream,
        prompt_hash: hash,
        strip: asked.strip(),
        dropped: req.dropped,
    })
}
