//! Phase gating of new chat requests (what the chain view says a new request gets;
//! `GET /v1/debug/chain` in [`super::debug`] shows the same decision per model).
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
//! | PoC, `relaxed`, some participant preserved for the model | served only by preserved participants' hosts (`stage=poc_relaxed`): the pick takes an escrow with such a host, its nonces go only to them |
//! | PoC, `relaxed`, no escrow of the model has a preserved host | 503 as with `off` ([`during_poc`]) |
//! | PoC, `relaxed`, nobody preserved or no fresh participants | 503 as with `off` |

use std::{collections::BTreeSet, sync::Arc};

use devshard_actors::{
    chain::{admission, admission::refusal, Admission},
    policy::reason::PickRefusal,
    protocol::crypto::Address,
};
use slog::{info, Logger};

use super::error::ApiError;
use crate::state::AppState;

/// A request admitted during PoC in relaxed mode: where it may go, and the answer when none of
/// the model's escrows has such a host.
#[derive(Debug, Clone)]
pub struct Relaxed {
    /// The preserved participants (their hosts are the only ones it may use).
    pub only: Arc<BTreeSet<Address>>,
    retry_after_s: u64,
    message: String,
}

/// The refusal when a new request for `model` must be refused now (see the module docs; its
/// status and body come from [`ApiError::PhaseRefused`]); `Ok(Some)` in relaxed PoC.
pub fn admit(state: &AppState, model: &str, log: &Logger) -> Result<Option<Relaxed>, ApiError> {
    let Some(view) = state.polling.view() else {
        return Ok(None);
    };
    let mode = state.polling.settings().poc_request_mode;
    let now_ms = state.clock.now_ms();
    let (retry_after_s, phase, message) = match admission(&view, mode, model, now_ms) {
        Admission::Serve => return Ok(None),
        Admission::ServeOnly { preserved, phase } => {
            info!(log, "PoC in progress; relaxed mode routes to preserved hosts only";
                "stage" => "poc_relaxed", "phase" => ?phase, "model" => model,
                "preserved" => preserved.len());
            let only = preserved.iter().filter_map(|a| Address::parse(a).ok());
            let extra = format!(" (no escrow of model {model} has a host preserved for it)");
            let (retry_after_s, message) = refusal(&view, now_ms, &extra);
            return Ok(Some(Relaxed {
                only: Arc::new(only.collect()),
                retry_after_s,
                message,
            }));
        }
        Admission::Refuse {
            retry_after_s,
            phase,
            message,
        } => (retry_after_s, phase, message),
    };
    let refused = ApiError::PhaseRefused {
        retry_after_s,
        message,
    };
    info!(log, "request refused during PoC"; "stage" => "poc_refused",
        "phase" => ?phase, "model" => model, "retry_after_s" => retry_after_s,
        "status" => refused.parts().status);
    Err(refused)
}

/// A relaxed-mode request's placement error: when every escrow of the model was passed over for
/// want of a preserved host, the same 503 as `off` mode; any other error unchanged.
pub fn during_poc(relaxed: Option<&Relaxed>, e: ApiError, log: &Logger) -> ApiError {
    let Some(r) = relaxed else {
        return e;
    };
    match &e {
        ApiError::NoEscrow { refusals, .. }
            if !refusals.is_empty()
                && refusals
                    .iter()
                    .all(|(_, why)| *why == PickRefusal::NoPreservedHost) =>
        {
            info!(log, "request refused during PoC: no escrow has a preserved host";
                "stage" => "poc_refused", "retry_after_s" => r.retry_after_s, "status" => 503);
            ApiError::PhaseRefused {
                retry_after_s: r.retry_after_s,
                message: r.message.clone(),
            }
        }
        _ => e,
    }
}
