//! `ApiError`: every error the HTTP edge answers with, mapped once (here) to an HTTP status and
//! an OpenAI-shaped body `{"error":{"message","type","param","code"}}`, plus `Retry-After` on
//! 429/503 (and whenever the race suggests one). Lower layers keep their own typed errors
//! (`DirectoryError`, `ChainError`, `RaceError`, `MailboxError`); they convert with `From`.
//!
//! | error | status | type | code |
//! |---|---|---|---|
//! | malformed JSON / invalid field | 400 | `invalid_request_error` | `invalid_json`, `missing_required_parameter`, `invalid_value`, `model_required` (+ `param`) |
//! | body over the limit | 413 | `invalid_request_error` | `request_too_large` |
//! | unknown model | 404 | `invalid_request_error` | `model_not_found` |
//! | missing/wrong bearer key | 401 | `invalid_request_error` | `invalid_api_key` |
//! | unknown route / escrow, admin off | 404 | `invalid_request_error` | `not_found`, `escrow_not_found` |
//! | wrong method | 405 | `invalid_request_error` | `method_not_allowed` |
//! | concurrent-race limit | 429 | `rate_limit_error` | `rate_limit_exceeded` (Retry-After 1) |
//! | race failed before the first byte | race status | race kind | race kind |
//! | escrow disabled / no live escrow / actor busy | 503 | `service_unavailable` | `escrow_failed`, `no_capacity`, `actor_timeout`, `actor_unavailable` |
//! | escrow settled / registered differently | 409 | `invalid_request_error` | `escrow_settled`, `conflict` |
//! | escrow created by another key | 400 | `invalid_request_error` | `escrow_creator_mismatch` |
//! | chain unreachable / odd chain data | 502 | `upstream_error` | `chain_unavailable`, `chain_data_invalid` |
//! | store or internal failure | 500 | `server_error` | `store_error`, `escrow_start_failed`, `internal_error` |

use actix::MailboxError;
use actix_web::{
    http::{header, StatusCode},
    HttpResponse, HttpResponseBuilder, ResponseError,
};
use devshard_actors::{directory::DirectoryError, race::RaceError};
use serde_json::json;

use crate::chain::ChainError;

/// `Retry-After` seconds when a 429/503 carries no better hint.
pub const DEFAULT_RETRY_AFTER_S: u64 = 1;
/// `Retry-After` of an escrow disabled by its restart budget.
pub const FAILED_ESCROW_RETRY_AFTER_S: u64 = 30;

const INVALID: &str = "invalid_request_error";
const UNAVAILABLE: &str = "service_unavailable";
const UPSTREAM: &str = "upstream_error";
const SERVER: &str = "server_error";

/// Every error answered by the edge.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<&'static str>,
        code: &'static str,
    },
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("the model `{model}` does not exist; available models: {}", available.join(", "))]
    ModelNotFound {
        model: String,
        available: Vec<String>,
    },
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("method {0} is not allowed on this route")]
    MethodNotAllowed(String),
    #[error("too many requests in flight; retry shortly")]
    Saturated,
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Race(#[from] RaceError),
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error("an actor did not answer in time; retry shortly")]
    ActorTimeout,
    #[error("an actor is not running; retry shortly")]
    ActorGone,
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<MailboxError> for ApiError {
    fn from(e: MailboxError) -> Self {
        match e {
            MailboxError::Timeout => ApiError::ActorTimeout,
            MailboxError::Closed => ApiError::ActorGone,
        }
    }
}

/// Status, `type`, `code`, `param` and `Retry-After` of an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorParts {
    pub status: u16,
    pub kind: String,
    pub code: String,
    pub param: Option<&'static str>,
    pub retry_after_s: Option<u64>,
}

fn parts(status: u16, kind: &str, code: &str) -> ErrorParts {
    let retry_after_s = matches!(status, 429 | 503).then_some(DEFAULT_RETRY_AFTER_S);
    ErrorParts {
        status,
        kind: kind.to_string(),
        code: code.to_string(),
        param: None,
        retry_after_s,
    }
}

fn directory_parts(e: &DirectoryError) -> ErrorParts {
    match e {
        DirectoryError::UnknownModel(_) => ErrorParts {
            param: Some("model"),
            ..parts(404, INVALID, "model_not_found")
        },
        DirectoryError::UnknownEscrow(_) => parts(404, INVALID, "escrow_not_found"),
        DirectoryError::EscrowFailed(_) => ErrorParts {
            retry_after_s: Some(FAILED_ESCROW_RETRY_AFTER_S),
            ..parts(503, UNAVAILABLE, "escrow_failed")
        },
        DirectoryError::NoCapacity(_) => parts(503, UNAVAILABLE, "no_capacity"),
        DirectoryError::Start(..) => parts(500, SERVER, "escrow_start_failed"),
        DirectoryError::AlreadyRegistered(_) => parts(409, INVALID, "escrow_already_registered"),
        DirectoryError::Admin(_) => parts(500, SERVER, "participant_admin_failed"),
        DirectoryError::Store(_) => parts(500, SERVER, "store_error"),
    }
}

fn chain_parts(e: &ChainError) -> ErrorParts {
    match e {
        ChainError::InvalidEscrowId(_) => ErrorParts {
            param: Some("escrow_id"),
            ..parts(400, INVALID, "invalid_escrow_id")
        },
        ChainError::EscrowNotFound(_) => ErrorParts {
            param: Some("escrow_id"),
            ..parts(404, INVALID, "escrow_not_found")
        },
        ChainError::EscrowSettled(_) => parts(409, INVALID, "escrow_settled"),
        ChainError::CreatorMismatch { .. } => parts(400, INVALID, "escrow_creator_mismatch"),
        ChainError::UnknownModel(_) => ErrorParts {
            param: Some("model"),
            ..parts(400, INVALID, "model_required")
        },
        ChainError::EmptyGroup(_)
        | ChainError::InvalidAddress { .. }
        | ChainError::ParticipantNotFound { .. }
        | ChainError::MissingInferenceUrl { .. } => parts(502, UPSTREAM, "chain_data_invalid"),
        ChainError::Transport { .. } | ChainError::Status { .. } | ChainError::Decode { .. } => {
            parts(502, UPSTREAM, "chain_unavailable")
        }
        ChainError::Tls { .. } => parts(502, UPSTREAM, "chain_tls_untrusted"),
    }
}

impl ApiError {
    /// A 400 with a `param`.
    pub fn invalid(param: &'static str, code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param),
            code,
        }
    }

    /// How this error is answered.
    pub fn parts(&self) -> ErrorParts {
        match self {
            ApiError::BadRequest { param, code, .. } => ErrorParts {
                param: *param,
                ..parts(400, INVALID, code)
            },
            ApiError::BodyTooLarge { .. } => parts(413, INVALID, "request_too_large"),
            ApiError::ModelNotFound { .. } => ErrorParts {
                param: Some("model"),
                ..parts(404, INVALID, "model_not_found")
            },
            ApiError::Unauthorized(_) => parts(401, INVALID, "invalid_api_key"),
            ApiError::NotFound(_) => parts(404, INVALID, "not_found"),
            ApiError::MethodNotAllowed(_) => parts(405, INVALID, "method_not_allowed"),
            ApiError::Saturated => parts(429, "rate_limit_error", "rate_limit_exceeded"),
            ApiError::Conflict(_) => parts(409, INVALID, "conflict"),
            ApiError::Race(e) => {
                let status = if (400..600).contains(&e.status) {
                    e.status
                } else {
                    502
                };
                let mut p = parts(status, &e.kind, &e.kind);
                if e.retry_after_s.is_some() {
                    p.retry_after_s = e.retry_after_s;
                }
                p
            }
            ApiError::Directory(e) => directory_parts(e),
            ApiError::Chain(e) => chain_parts(e),
            ApiError::ActorTimeout => parts(503, UNAVAILABLE, "actor_timeout"),
            ApiError::ActorGone => parts(503, UNAVAILABLE, "actor_unavailable"),
            ApiError::Internal(_) => parts(500, SERVER, "internal_error"),
        }
    }

    /// The OpenAI error body.
    pub fn body(&self) -> serde_json::Value {
        let p = self.parts();
        json!({"error": {
            "message": self.to_string(),
            "type": p.kind,
            "param": p.param,
            "code": p.code,
        }})
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.parts().status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let p = self.parts();
        let mut res = HttpResponseBuilder::new(self.status_code());
        if let Some(s) = p.retry_after_s {
            res.insert_header((header::RETRY_AFTER, s.to_string()));
        }
        res.json(self.body())
    }
}
