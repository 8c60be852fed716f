//! Placing a chat request on an escrow and running its race (docs/lifecycle.md §1, "Picking").
//!
//! The escrow comes from [`operator::pick_escrow`]. An escrow can close between the pick and the
//! race's nonce request — the settlement drains it, or it reached its serving nonce limit — and
//! a race whose retry comes back to it is refused with `EscrowClosed` before any byte reached
//! the client. Such a request is placed again on another escrow of the model (at most
//! [`MAX_PLACEMENTS`] escrows in all); when the pick returns an escrow already refused, or no
//! escrow is left, the client gets a clear 503 with `Retry-After` naming the closed escrow.
//! The failed attempts of the first race settle in the closed escrow as any failed attempt
//! does; the request's record keeps the race that answered.
//!
//! Log stage `escrow_replaced` (warn on `no_other_escrow`); metric
//! `devshard_gateway_escrow_replacements_total{result = replaced | no_other_escrow}`.

use std::sync::{atomic::Ordering, Arc};

use devshard_actors::{
    directory::PickedEscrow,
    escrow::messages::InferenceParams,
    race::{DispatchHook, RaceActor, RaceError, RaceErrorKind, RaceSpec, RaceStart},
};
use slog::{info, warn, Logger};

use super::{error, error::ApiError, operator};
use crate::state::AppState;

/// Escrows one request may be placed on.
pub const MAX_PLACEMENTS: usize = 3;
/// `Retry-After` when no other escrow can take the request.
const CLOSED_RETRY_S: u64 = 5;

/// Picks an escrow for the request, runs the race, and places the request again when its escrow
/// closed before it started there. `escrow` is set to the escrow that answered. `dispatched`
/// goes to the first race (called when its first attempt goes to a host).
pub async fn place(
    state: &AppState,
    params: Arc<InferenceParams>,
    escrow: &mut Option<String>,
    mut dispatched: Option<DispatchHook>,
    log: &Logger,
) -> Result<RaceStart, ApiError> {
    let rid = params.request_id.clone();
    let mut closed: Vec<String> = Vec::new();
    loop {
        let ask = operator::Ask {
            model: &params.model,
            request_id: &rid,
            input_bytes: u64::try_from(params.body.len()).unwrap_or(u64::MAX),
            max_tokens: params.max_tokens,
            closed: &closed,
            only_hosts: params.only_hosts.as_ref(),
        };
        let picked = match operator::pick_escrow(state, ask) {
            Ok(p) if !closed.contains(&p.escrow_id) => p,
            // Nothing else to place it on: the refusal of the last escrow, stated clearly.
            other => {
                if let Some(last) = closed.last() {
                    return Err(no_other_escrow(state, &params.model, last, log));
                }
                other?
            }
        };
        *escrow = Some(picked.escrow_id.clone());
        let id = picked.escrow_id.clone();
        let race = run_race(
            state,
            picked,
            Arc::clone(&params),
            &rid,
            dispatched.take(),
            log,
        );
        match race.await {
            Err(ApiError::Race(e)) if e.kind == RaceErrorKind::EscrowClosed => {
                closed.push(id.clone());
                if closed.len() >= MAX_PLACEMENTS {
                    return Err(no_other_escrow(state, &params.model, &id, log));
                }
                state
                    .metrics
                    .replacements
                    .with_label_values(&["replaced"])
                    .inc();
                info!(log, "escrow closed before the request started; placing it again";
                    "stage" => "escrow_replaced", "result" => "replaced", "closed" => &id,
                    "reason" => %e);
            }
            other => return other,
        }
    }
}

/// The 503 when the request's escrow closed and no other escrow of `model` can take it.
fn no_other_escrow(state: &AppState, model: &str, closed: &str, log: &Logger) -> ApiError {
    state
        .metrics
        .replacements
        .with_label_values(&["no_other_escrow"])
        .inc();
    warn!(log, "escrow closed and no other escrow can take the request";
        "stage" => "escrow_replaced", "result" => "no_other_escrow", "closed" => closed);
    let e = ApiError::Race(RaceError {
        kind: RaceErrorKind::EscrowClosed,
        message: format!(
            "escrow {closed} closed for settlement before this request started, and no other \
             escrow of model {model} can take it now; retry shortly"
        ),
        retry_after_s: Some(CLOSED_RETRY_S),
    });
    state.metrics.race_error(e.parts().status);
    e
}

/// One race on `picked` (its answer, or its error before the first byte). The pick's reservation
/// of the request's cost is held until the race answers (the escrow ends it earlier, when it
/// starts the request).
async fn run_race(
    state: &AppState,
    picked: PickedEscrow,
    params: Arc<InferenceParams>,
    rid: &str,
    dispatched: Option<DispatchHook>,
    log: &Logger,
) -> Result<RaceStart, ApiError> {
    let race_id = state.race_ids.fetch_add(1, Ordering::Relaxed);
    state.accounting.set_escrow(rid, &picked.escrow_id, race_id);
    info!(log, "escrow picked"; "stage" => "escrow_picked", "escrow" => &picked.escrow_id,
        "race" => race_id);
    let (report, reported) = tokio::sync::oneshot::channel();
    let reply = RaceActor::start_race(RaceSpec {
        race_id,
        escrow_id: picked.escrow_id,
        escrow: picked.addr,
        directory: state.directory.clone(),
        params,
        limits: state.limits.race,
        clock: state.clock.clone(),
        log: state.log.clone(),
        metrics: state.actor_metrics.clone(),
        actors: state.actors.clone(),
        report: Some(report),
        stream_error: error::stream_error_event,
        dispatched,
    });
    let result = match reply.await {
        Ok(Ok(start)) => Ok(start),
        Ok(Err(e)) if e.kind == RaceErrorKind::EscrowClosed => {
            return Err(ApiError::Race(e));
        }
        Ok(Err(e)) => {
            let e = ApiError::Race(e);
            state.metrics.race_error(e.parts().status);
            Err(e)
        }
        Err(_) => {
            state.metrics.race_error(ApiError::RaceLost.parts().status);
            Err(ApiError::RaceLost)
        }
    };
    // The race outlives this handler for a stream: its nonces and attempts arrive when it ends.
    let (acc, clock, id) = (
        state.accounting.clone(),
        state.clock.clone(),
        rid.to_string(),
    );
    actix_web::rt::spawn(async move {
        if let Ok(report) = reported.await {
            acc.set_race_report(&id, report, clock.now_ms());
        }
    });
    result
}
