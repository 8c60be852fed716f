//! Placing a chat request on an escrow and running its race (docs/lifecycle.md §1, "Picking").
//!
//! The escrow comes from [`operator::pick_escrow`]. An escrow can close between the pick and the
//! race's nonce request — the settlement drains it, or it reached its serving nonce limit — and
//! a race whose nonce request comes to it then is refused with `EscrowClosed` before any byte
//! reached the client. Such a request is placed again on another escrow of the model (at most
//! [`MAX_PLACEMENTS`] escrows in all). When no escrow here is left, [`Unplaced::Elsewhere`]
//! tells the edge that another replica's escrow may serve it — only when **no nonce was granted
//! to it here**: each closed race's own report (every nonce its escrow granted it, unused grants
//! included: what the ledger records) is awaited, and every one must be empty. A request holding
//! a nonce here stays here and gets the clear 503 with `Retry-After` naming the closed escrow
//! ([`refused_here`]). A superseded race's report is not the request's: the record keeps the
//! race that answered.
//!
//! Log stage `escrow_replaced` (`result`: `replaced`, `forwarded`, `returned`, `no_other_escrow`,
//! the last one at warn); metric `devshard_gateway_escrow_replacements_total{result}`.

use std::sync::{atomic::Ordering, Arc};

use devshard_actors::{
    directory::PickedEscrow,
    escrow::messages::InferenceParams,
    race::{DispatchHook, RaceActor, RaceError, RaceErrorKind, RaceReport, RaceSpec, RaceStart},
};
use slog::{info, warn, Logger};
use tokio::sync::oneshot;

use super::{error, error::ApiError, operator};
use crate::state::AppState;

/// Escrows one request may be placed on.
pub const MAX_PLACEMENTS: usize = 3;
/// `Retry-After` when no other escrow can take the request.
const CLOSED_RETRY_S: u64 = 5;

/// Why a request was not placed here.
#[derive(Debug)]
pub enum Unplaced {
    /// It failed here: its error is the answer.
    Failed(ApiError),
    /// No escrow here can take it and nothing of it is at stake here (no nonce granted): an
    /// escrow of another replica may serve it; else [`refused_here`] gives the answer.
    Elsewhere(Elsewhere),
}

/// What left a request without an escrow here, no nonce granted to it.
#[derive(Debug)]
pub enum Elsewhere {
    /// The pick found no escrow that takes it (no race ran): its refusal.
    NoLocalEscrow(ApiError),
    /// Every escrow it was placed on closed before granting it a nonce; `closed` is the last,
    /// `report` its race's report (no nonce).
    EscrowClosed {
        model: String,
        closed: String,
        report: Option<RaceReport>,
    },
}

impl Elsewhere {
    /// The `reason` of the log lines and the counter of the request sent elsewhere.
    pub fn reason(&self) -> &'static str {
        match self {
            Elsewhere::NoLocalEscrow(_) => "no_local_escrow",
            Elsewhere::EscrowClosed { .. } => "escrow_closed",
        }
    }

    /// The answer that says why (no count, no log: the caller's outcome decides those).
    pub fn into_refusal(self) -> ApiError {
        match self {
            Elsewhere::NoLocalEscrow(refusal) => refusal,
            Elsewhere::EscrowClosed { model, closed, .. } => closed_refusal(&model, &closed),
        }
    }

    /// The escrow that closed under the request, if that is why.
    pub fn closed(&self) -> Option<&str> {
        match self {
            Elsewhere::NoLocalEscrow(_) => None,
            Elsewhere::EscrowClosed { closed, .. } => Some(closed),
        }
    }
}

/// Picks an escrow for the request, runs the race, and places the request again when its escrow
/// closed before it started there. `escrow` is set to the escrow that answered. `dispatched`
/// goes to the first race (called when its first attempt goes to a host).
pub async fn place(
    state: &AppState,
    params: Arc<InferenceParams>,
    escrow: &mut Option<String>,
    mut dispatched: Option<DispatchHook>,
    log: &Logger,
) -> Result<RaceStart, Unplaced> {
    let rid = params.request_id.clone();
    let mut closed: Vec<String> = Vec::new();
    let mut granted = false;
    let mut last: Option<RaceReport> = None;
    loop {
        let ask = operator::Ask {
            model: &params.model,
            request_id: &rid,
            input_bytes: u64::try_from(params.body.len()).unwrap_or(u64::MAX),
            max_tokens: params.max_tokens,
            closed: &closed,
            only_hosts: params.only_hosts.as_ref(),
        };
        let picked = match (operator::pick_escrow(state, ask), closed.last()) {
            (Ok(p), _) if !closed.contains(&p.escrow_id) && closed.len() < MAX_PLACEMENTS => p,
            // Nothing else to place it on here: elsewhere when nothing is at stake, else the
            // refusal of the last escrow, stated clearly.
            (_, Some(id)) => {
                let gone = Elsewhere::EscrowClosed {
                    model: params.model.clone(),
                    closed: id.clone(),
                    report: last,
                };
                return Err(match granted {
                    false => Unplaced::Elsewhere(gone),
                    true => Unplaced::Failed(refused_here(state, &rid, gone, log)),
                });
            }
            (Err(e @ ApiError::NoEscrow { .. }), None) => {
                return Err(Unplaced::Elsewhere(Elsewhere::NoLocalEscrow(e)))
            }
            (Err(e), None) => return Err(Unplaced::Failed(e)),
            (Ok(p), None) => p,
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
        let (e, report) = match race.await {
            Ran::Done(done) => return done.map_err(Unplaced::Failed),
            Ran::Closed(e, report) => (e, report),
        };
        // The race stops right after its refusal; no report at all counts as a nonce granted
        // (fail closed: the request then stays here).
        last = report.await.ok();
        let nonces = last.as_ref().map(|r| r.nonces.len());
        granted |= nonces != Some(0);
        closed.push(id.clone());
        if closed.len() < MAX_PLACEMENTS {
            count(state, "replaced");
            info!(log, "escrow closed before the request started; placing it again";
                "stage" => "escrow_replaced", "result" => "replaced", "closed" => &id,
                "nonces" => nonces, "reason" => %e);
        }
    }
}

/// The answer here to a request no escrow here could take after all (nothing elsewhere took it:
/// no other replica, or this one may not forward it). `EscrowClosed`: the 503 naming the closed
/// escrow (stage `escrow_replaced`, `no_other_escrow`), and its race's report for the record.
pub fn refused_here(state: &AppState, rid: &str, why: Elsewhere, log: &Logger) -> ApiError {
    let (model, closed, report) = match why {
        Elsewhere::NoLocalEscrow(refusal) => return refusal,
        Elsewhere::EscrowClosed {
            model,
            closed,
            report,
        } => (model, closed, report),
    };
    if let Some(report) = report {
        state
            .accounting
            .set_race_report(rid, report, state.clock.now_ms());
    }
    count(state, "no_other_escrow");
    warn!(log, "escrow closed and no other escrow can take the request";
        "stage" => "escrow_replaced", "result" => "no_other_escrow", "closed" => &closed);
    let e = closed_refusal(&model, &closed);
    state.metrics.race_error(e.parts().status);
    e
}

/// The 503 when the request's escrow `closed` and no other escrow of `model` can take it.
fn closed_refusal(model: &str, closed: &str) -> ApiError {
    ApiError::Race(RaceError {
        kind: RaceErrorKind::EscrowClosed,
        message: format!(
            "escrow {closed} closed for settlement before this request started, and no other \
             escrow of model {model} can take it now; retry shortly"
        ),
        retry_after_s: Some(CLOSED_RETRY_S),
    })
}

/// A request whose escrow closed under it, with no nonce granted, went to another replica
/// (`forwarded`: to an owner elsewhere; `returned`: handed back to the replica that forwarded
/// it here, which sends it to another owner).
pub fn sent_elsewhere(state: &AppState, why: &Elsewhere, result: &'static str, log: &Logger) {
    let Some(closed) = why.closed() else { return };
    count(state, result);
    info!(log, "escrow closed before the request started; no other escrow here, sent elsewhere";
        "stage" => "escrow_replaced", "result" => result, "closed" => closed);
}

fn count(state: &AppState, result: &str) {
    state
        .metrics
        .replacements
        .with_label_values(&[result])
        .inc();
}

/// How a race ended for the placement.
enum Ran {
    /// Its answer, or its error (its report goes to the request's record).
    Done(Result<RaceStart, ApiError>),
    /// Its escrow closed before the request started there; the race's report follows.
    Closed(RaceError, oneshot::Receiver<RaceReport>),
}

/// One race on `picked`. The pick's reservation of the request's cost is held until the race
/// answers (the escrow ends it earlier, when it starts the request).
async fn run_race(
    state: &AppState,
    picked: PickedEscrow,
    params: Arc<InferenceParams>,
    rid: &str,
    dispatched: Option<DispatchHook>,
    log: &Logger,
) -> Ran {
    let race_id = state.race_ids.fetch_add(1, Ordering::Relaxed);
    state.accounting.set_escrow(rid, &picked.escrow_id, race_id);
    info!(log, "escrow picked"; "stage" => "escrow_picked", "escrow" => &picked.escrow_id,
        "race" => race_id);
    let (report, reported) = oneshot::channel();
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
        Ok(Err(e)) if e.kind == RaceErrorKind::EscrowClosed => return Ran::Closed(e, reported),
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
    Ran::Done(result)
}
