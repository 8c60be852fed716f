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
//! | PoC, `relaxed`, some participant preserved for the model | served (`stage=poc_relaxed`; routing only to the preserved participants is future work) |
//! | PoC, `relaxed`, nobody preserved or no fresh participants | 503 as with `off` |

use devshard_actors::chain::{admission, Admission};
use slog::{info, Logger};

use super::error::ApiError;
use crate::state::AppState;

/// The refusal when a new request for `model` must be refused now (see the module docs; its
/// status and body come from [`ApiError::PhaseRefused`]).
pub fn admit(state: &AppState, model: &str, log: &Logger) -> Option<ApiError> {
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
            let refused = ApiError::PhaseRefused {
                retry_after_s,
                message,
            };
            info!(log, "request refused during PoC"; "stage" => "poc_refused",
                "phase" => ?phase, "model" => model, "retry_after_s" => retry_after_s,
                "status" => refused.parts().status);
            Some(refused)
        }
    }
}
