//! `ApiError`: every error the HTTP edge answers with, mapped once (here) to an HTTP status and
//! an OpenAI-shaped body `{"error":{"message","type","param","code"}}`, plus `Retry-After` on
//! 429/503 (and whenever the race suggests one). Lower layers keep their own typed errors
//! (`DirectoryError`, `ChainError`, `RaceError`, `MailboxError`); they convert with `From`. The
//! actors crate names no client status: this file is the only place one is chosen (besides the
//! mid-stream error event, [`stream_error_event`], also here).
//!
//! | error | status | type | code |
//! |---|---|---|---|
//! | malformed JSON / invalid field | 400 | `invalid_request_error` | `invalid_json`, `missing_required_parameter`, `invalid_value`, `model_required` (+ `param`) |
//! | body over the limit | 413 | `invalid_request_error` | `request_too_large` |
//! | unknown model | 404 | `invalid_request_error` | `model_not_found` |
//! | missing/wrong bearer key | 401 | `invalid_request_error` | `invalid_api_key` |
//! | unknown route / escrow, admin off | 404 | `invalid_request_error` | `not_found`, `escrow_not_found` |
//! | wrong method | 405 | `invalid_request_error` | `method_not_allowed` |
//! | hard ceiling `max_concurrent_races` (`Saturated`) | 503 | `service_unavailable` | `gateway_saturated` (Retry-After 1) |
//! | adaptive limit: queue full or queue deadline passed (`Shed`, `crate::overload`) | 503 | `service_unavailable` | `gateway_saturated` (Retry-After `overload.retry_after_s`) |
//! | race: the escrow's hosts refuse connections or reject requests before any work, no nonce taken (`HostsUnreachable`, the reachability gate) | 503 | `service_unavailable` | `hosts_unreachable` (Retry-After to the next probe, at least 1) |
//! | race: every host that could serve is caught up in the background from far behind, no nonce taken (`HostsCatchingUp`, `escrow/reach/mod.rs`) | 503 | `service_unavailable` | `hosts_catching_up` (Retry-After from the diffs it lacks, 1–30 s) |
//! | race: escrow queue full (`Saturated`) | 429 | `rate_limit_exceeded` | `rate_limit_exceeded` (Retry-After 1) |
//! | race: escrow unavailable or restarting, its store down, or its lease lost to another replica (`EscrowUnavailable`) | 503 | `service_unavailable` | `service_unavailable` (Retry-After 5, or 1 when restarting) |
//! | race: the escrow closed for settlement and no other escrow of the model can take the request (`EscrowClosed`, after the re-placement of `openai.rs`) | 503 | `service_unavailable` | `service_unavailable` (Retry-After 5) |
//! | race: protocol failure (`Internal`) | 500 | `internal_error` | `internal_error` |
//! | race: hosts failed, none left, empty or unverifiable answer (`HostsFailed`) | 502 | `upstream_error` | `upstream_error` |
//! | race: the last host sent `Retry-After` (`HostBusy`) | 503 | `upstream_error` | `upstream_error` (the host's Retry-After) |
//! | race: the host stalled (`Stalled`) | 504 | `timeout` | `timeout` |
//! | race: host error event (`HostErrorEvent`) | the host's status if 400–599, else 502 | `invalid_request_error` (4xx), `timeout` (504), else `upstream_error` | same as type |
//! | race: cancelled (`Cancelled`) | 499 | `invalid_request_error` | `invalid_request_error` |
//! | race: every host failed the same way (`Shared`): overload | 503 | `service_unavailable` | `service_unavailable` (host's Retry-After or 5) |
//! | race: `Shared`: the hosts reject the request | 400 | `upstream_error` | `upstream_error` |
//! | race: `Shared`: any other class | 502 | `upstream_error` | `upstream_error` |
//! | race ended without an answer | 502 | `upstream_error` | `upstream_error` |
//! | every escrow of the model deactivated | 503 | `no_active_escrow` | `no_active_escrow` (Retry-After 30) |
//! | no escrow of the model can take the request (out of balance, draining, nonce limit, no routable host, restarting; the message says which) | 503 | `service_unavailable` | `no_escrow_available` (Retry-After 5 when it passes by itself, else 30) |
//! | new request during PoC (`Admission::Refuse`, see `gate`) | 503 | `service_unavailable` | `poc_in_progress` (Retry-After to the end of PoC) |
//! | winner broke mid-stream (SSE error event, status already 200) | — | `upstream_error` | `502` |
//! | escrow disabled / actor busy | 503 | `service_unavailable` | `escrow_failed`, `actor_timeout`, `actor_unavailable` |
//! | escrow settled / registered differently | 409 | `invalid_request_error` | `escrow_settled`, `conflict` |
//! | adopt: escrow already registered; delete: escrow not settled or already used (`EscrowConflict`) | 409 | `invalid_request_error` | `escrow_already_registered`, `escrow_not_settled`, `escrow_in_use` |
//! | adopt: no chain of diffs held by a quorum of hosts | 502 | `upstream_error` | `adopt_no_quorum` |
//! | adopt: the store holds another diff log of the escrow | 409 | `invalid_request_error` | `adopt_store_conflict` |
//! | escrow created by another key | 400 | `invalid_request_error` | `escrow_creator_mismatch` |
//! | escrow's own key unreadable (registration / settlement) | 400 / 500 | `invalid_request_error` / `server_error` | `escrow_key_unreadable` |
//! | settle: unknown escrow / already settled / not ours | 404 / 409 / 403 | `invalid_request_error` | `escrow_not_found`, `escrow_settled`, `escrow_not_ours` |
//! | settle / create on a replica that does not hold the escrow's lease / the rotation's duty lease (PostgreSQL, several replicas) | 503 | `service_unavailable` | `escrow_elsewhere`, `rotation_elsewhere` (Retry-After 5) |
//! | chain unreachable / odd chain data | 502 | `upstream_error` | `chain_unavailable`, `chain_data_invalid` |
//! | the database is unavailable (PostgreSQL store reconnecting, write queue full; `StoreError::Unavailable`) | 503 | `service_unavailable` | `database_unavailable` (Retry-After 2) |
//! | store or internal failure | 500 | `server_error` | `store_error`, `escrow_start_failed`, `internal_error` |
//! | PostgreSQL replicas: the owner replica unreachable / a forwarded request not servable here (`Forward`, `crate::replicas`) | 503 | `service_unavailable` | `owner_unreachable`, `forward_hop_limit` (Retry-After 1) |

use actix::MailboxError;
use actix_web::{
    http::{header, StatusCode},
    HttpResponse, HttpResponseBuilder, ResponseError,
};
use devshard_actors::{
    directory::{pick, DirectoryError},
    escrow::{adopt::AdoptError, key::KeyError},
    policy::reason::PickRefusal,
    race::RaceError,
};
use serde_json::json;

use crate::{
    chain::ChainError,
    overload::{Shed, ShedReason},
    state::settlements::SettleError,
};

/// `Retry-After` seconds when a 429/503 carries no better hint.
pub const DEFAULT_RETRY_AFTER_S: u64 = 1;
/// `Retry-After` while the database is unavailable (the store retries its connection every 2 s
/// at most).
pub const DATABASE_UNAVAILABLE_RETRY_AFTER_S: u64 = 2;
/// `Retry-After` of an escrow disabled by its restart budget.
pub const FAILED_ESCROW_RETRY_AFTER_S: u64 = 30;
/// `Retry-After` when every escrow of a model is deactivated (or none can pay, or all drain).
pub const NO_ACTIVE_ESCROW_RETRY_AFTER_S: u64 = 30;
/// Retry-After of a call another replica must serve (it holds the escrow's or the duty's lease).
pub const ELSEWHERE_RETRY_AFTER_S: u64 = 5;
/// `Retry-After` when no escrow can take a request for a reason that passes by itself.
pub const TRANSIENT_NO_ESCROW_RETRY_AFTER_S: u64 = 5;

use self::parts::{chain_parts, directory_parts, no_escrow_parts, parts, race_parts, store_parts};
pub use self::parts::{stream_error_event, ErrorParts};

const INVALID: &str = "invalid_request_error";
const UNAVAILABLE: &str = "service_unavailable";
const UPSTREAM: &str = "upstream_error";
const SERVER: &str = "server_error";
/// `code` of a request refused during PoC.
pub const CODE_POC: &str = "poc_in_progress";
/// `code` of a request shed because the gateway is saturated.
pub const CODE_SATURATED: &str = "gateway_saturated";

/// What a shed client is told.
fn shed_message(shed: &Shed) -> String {
    let why = match shed.reason {
        ShedReason::QueueFull => "its queue is full",
        ShedReason::QueueTimeout => "no slot became free while the request waited in its queue",
    };
    format!(
        "the gateway is saturated: {why} (adaptive concurrency limit {}); retry after {} s",
        shed.limit, shed.retry_after_s
    )
}

/// Every error answered by the edge.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<&'static str>,
        code: &'static str,
    },
    /// A 400 naming a parameter path such as `messages[0].role`.
    #[error("{message}")]
    InvalidParam {
        message: String,
        param: String,
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
    /// The hard ceiling on races in flight.
    #[error("the gateway is saturated: {ceiling} requests are in flight (max_concurrent_races); retry after {DEFAULT_RETRY_AFTER_S} s")]
    Saturated { ceiling: usize },
    /// Shed by the adaptive limit's queue.
    #[error("{}", shed_message(.0))]
    Shed(Shed),
    #[error("{0}")]
    Conflict(String),
    /// An escrow admin call the escrow's state forbids (adopt, delete), with its own code.
    #[error("{message}")]
    EscrowConflict { code: &'static str, message: String },
    #[error(transparent)]
    Adopt(#[from] AdoptError),
    #[error(transparent)]
    Race(#[from] RaceError),
    #[error("the request's race ended without an answer")]
    RaceLost,
    #[error("every escrow serving `{0}` is deactivated")]
    NoActiveEscrow(String),
    /// No escrow of the model can take the request (admission, `directory/pick.rs`).
    #[error("{}; rotation is {}", pick::explain(model, refusals), if *rotation { "on" } else { "off" })]
    NoEscrow {
        model: String,
        refusals: Vec<(String, PickRefusal)>,
        rotation: bool,
    },
    #[error("{message}")]
    PhaseRefused { retry_after_s: u64, message: String },
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Settle(#[from] SettleError),
    #[error(transparent)]
    Create(#[from] crate::rotation::CreateError),
    /// An escrow's own signing key cannot be read (the message never shows the key).
    #[error("the escrow's signing key cannot be read: {0}")]
    EscrowKey(KeyError),
    #[error("an actor did not answer in time; retry shortly")]
    ActorTimeout,
    #[error("an actor is not running; retry shortly")]
    ActorGone,
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Forward(#[from] crate::replicas::ForwardError),
    #[error(transparent)]
    Record(#[from] crate::escrows::RecordError),
}

impl From<MailboxError> for ApiError {
    fn from(e: MailboxError) -> Self {
        match e {
            MailboxError::Timeout => ApiError::ActorTimeout,
            MailboxError::Closed => ApiError::ActorGone,
        }
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
                param: param.map(str::to_string),
                ..parts(400, INVALID, code)
            },
            ApiError::InvalidParam { param, code, .. } => ErrorParts {
                param: Some(param.clone()),
                ..parts(400, INVALID, code)
            },
            ApiError::BodyTooLarge { .. } => parts(413, INVALID, "request_too_large"),
            ApiError::ModelNotFound { .. } => ErrorParts {
                param: Some("model".into()),
                ..parts(404, INVALID, "model_not_found")
            },
            ApiError::Unauthorized(_) => parts(401, INVALID, "invalid_api_key"),
            ApiError::NotFound(_) => parts(404, INVALID, "not_found"),
            ApiError::MethodNotAllowed(_) => parts(405, INVALID, "method_not_allowed"),
            ApiError::Saturated { .. } => parts(503, UNAVAILABLE, CODE_SATURATED),
            ApiError::Shed(shed) => ErrorParts {
                retry_after_s: Some(shed.retry_after_s),
                ..parts(503, UNAVAILABLE, CODE_SATURATED)
            },
            ApiError::Conflict(_) => parts(409, INVALID, "conflict"),
            ApiError::EscrowConflict { code, .. } => parts(409, INVALID, code),
            ApiError::Adopt(e) => match e {
                AdoptError::NoQuorum { .. } => parts(502, UPSTREAM, "adopt_no_quorum"),
                AdoptError::StoreDiffers(_) => parts(409, INVALID, "adopt_store_conflict"),
                AdoptError::Session(..) => parts(502, UPSTREAM, "chain_data_invalid"),
                AdoptError::Store(e) => store_parts(e),
            },
            ApiError::Race(e) => race_parts(e),
            ApiError::RaceLost => parts(502, UPSTREAM, UPSTREAM),
            ApiError::PhaseRefused { retry_after_s, .. } => ErrorParts {
                retry_after_s: Some(*retry_after_s),
                ..parts(503, UNAVAILABLE, CODE_POC)
            },
            ApiError::NoActiveEscrow(_) => ErrorParts {
                retry_after_s: Some(NO_ACTIVE_ESCROW_RETRY_AFTER_S),
                ..parts(503, "no_active_escrow", "no_active_escrow")
            },
            ApiError::NoEscrow {
                model, refusals, ..
            } => no_escrow_parts(model, refusals),
            ApiError::Directory(e) => directory_parts(e),
            ApiError::Chain(e) => chain_parts(e),
            ApiError::Settle(e) => match e {
                SettleError::UnknownEscrow(_) | SettleError::NoSettlement(_) => {
                    parts(404, INVALID, "escrow_not_found")
                }
                SettleError::AlreadySettled(_) => parts(409, INVALID, "escrow_settled"),
                SettleError::NotOurs { .. } => parts(403, INVALID, "escrow_not_ours"),
                SettleError::Key(..) => parts(500, SERVER, "escrow_key_unreadable"),
                SettleError::NotOwner(_) => ErrorParts {
                    retry_after_s: Some(ELSEWHERE_RETRY_AFTER_S),
                    ..parts(503, UNAVAILABLE, "escrow_elsewhere")
                },
            },
            ApiError::Create(e) => {
                use crate::rotation::CreateError as C;
                match e {
                    C::ChainUnavailable(_) => parts(502, UPSTREAM, "chain_unavailable"),
                    C::Refused { .. } | C::Failed(_) => {
                        parts(502, UPSTREAM, "escrow_creation_failed")
                    }
                    C::Store(_) => parts(500, SERVER, "internal_error"),
                    C::Invalid(_) => parts(400, INVALID, "invalid_value"),
                    C::NotLeader { .. } => ErrorParts {
                        retry_after_s: Some(ELSEWHERE_RETRY_AFTER_S),
                        ..parts(503, UNAVAILABLE, "rotation_elsewhere")
                    },
                }
            }
            ApiError::EscrowKey(_) => ErrorParts {
                param: Some("key_file".into()),
                ..parts(400, INVALID, "escrow_key_unreadable")
            },
            ApiError::ActorTimeout => parts(503, UNAVAILABLE, "actor_timeout"),
            ApiError::ActorGone => parts(503, UNAVAILABLE, "actor_unavailable"),
            ApiError::Internal(_) => parts(500, SERVER, "internal_error"),
            ApiError::Forward(e) => parts(503, UNAVAILABLE, e.code()),
            ApiError::Record(e) => match e {
                crate::escrows::RecordError::Store { source, .. } => store_parts(source),
                crate::escrows::RecordError::Unreadable { .. } => {
                    parts(500, SERVER, "internal_error")
                }
            },
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

mod parts;
#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
