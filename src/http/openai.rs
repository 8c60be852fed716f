//! `POST /v1/chat/completions`.
//!
//! Order of checks (every rejection happens before any escrow is touched): caller identity
//! ([`access::identify`], 401) → body size (413) → JSON, `messages`, token limits, `stream`,
//! `model` type (400, [`normalize::parse`]) → model among the served ones (404/400) → the
//! model's access mode ([`access::authorize`], 401/403) → the request table and
//! `Idempotency-Key` (a retry joins or replays its first request, 422 on key reuse;
//! `crate::state::accounting`) → phase gating (503 + `Retry-After` during PoC, [`gate::admit`]) →
//! the hard ceiling on races in flight (503) → the adaptive limit on races starting (its latency
//! sample: admission until the first attempt goes to a host; its slot: until the first byte, or
//! until dispatch with `release_at_dispatch`), which may
//! queue the request (503 + `Retry-After` when shed; `crate::overload`) → escrow choice ([`operator::pick_escrow`]: the directory's published board, no message;
//! skipping deactivated escrows, admission by state, nonces, hosts and balance) → the race
//! ([`placement::place`], which also moves a request whose escrow closed for settlement before it
//! started there to another escrow of the model; with none left here and no nonce granted to it,
//! PostgreSQL replicas send it to another replica: [`forward::chat_after_local_refusal`]). The
//! race starts inside the handler, so that it lives on this worker's arbiter (awc is `!Send`).
//!
//! On PostgreSQL replicas, a request whose model has no usable escrow here is forwarded, after
//! the body checks, to the replica owning one ([`forward::chat_elsewhere`]), before any
//! accounting here (the owner records it).
//!
//! Answers: streaming → 200 `text/event-stream` with the race's bytes; non-streaming → 200 JSON;
//! a race failure before the first byte → its status with an OpenAI error body. Every answer
//! carries `X-Request-Id`, and `X-Devshard-Escrow` (+ upstream `X-Devshard-ID`) once an escrow
//! was picked; on PostgreSQL also `X-Devshard-Replica` (the replica that served it).

use std::sync::Arc;

use actix_web::{
    http::header::{self, HeaderValue},
    web, HttpRequest, HttpResponse, ResponseError,
};
use devshard_actors::{escrow::messages::InferenceParams, race::RaceStart};
use slog::{info, o, warn, Logger};

use super::{
    access, accounting,
    error::ApiError,
    forward::{self, AfterRefusal},
    gate, normalize,
    placement::{self, Unplaced},
    read_body, request_id,
    sse::InFlight,
    HEADER_DEVSHARD_ID, HEADER_ESCROW, HEADER_REQUEST_ID,
};
use crate::{
    metrics::REJECT_MAX_CONCURRENT,
    replicas::HEADER_REPLICA,
    state::accounting::{fingerprint, Begin, Outcome, Record, Stored},
    state::AppState,
};

/// Header naming a client's retry key (see `crate::state::accounting`).
pub const HEADER_IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The chat handler (see the module docs).
pub async fn chat(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let rid = request_id(&req, &state);
    let log = state.log.new(o!("request" => rid.clone()));
    let mut escrow: Option<String> = None;
    let mut tracked = false;
    let guard = accounting::AbandonGuard::new(&state, &rid);
    let result = chat_inner(&req, payload, &state, &rid, &log, &mut escrow, &mut tracked).await;
    guard.disarm();
    if tracked {
        record_failure(&state, &rid, &result);
    }
    let mut res = match result {
        Ok(res) => res,
        Err(e) => {
            let status = e.parts().status;
            if status >= 500 {
                warn!(log, "request failed"; "stage" => "request_failed", "status" => status,
                    "error" => %e);
            } else {
                info!(log, "request rejected"; "stage" => "request_rejected", "status" => status,
                    "error" => %e);
            }
            e.error_response()
        }
    };
    let headers = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&rid) {
        headers.insert(header::HeaderName::from_static(HEADER_REQUEST_ID), v);
    }
    let replica = state.replicas.as_ref().map(|r| r.id());
    if let Some(id) = replica.and_then(|id| HeaderValue::from_str(id).ok()) {
        // A forwarded answer already names the owner that served it.
        let name = header::HeaderName::from_static(HEADER_REPLICA);
        if !headers.contains_key(&name) {
            headers.insert(name, id);
        }
    }
    if let Some(id) = escrow.and_then(|id| HeaderValue::from_str(&id).ok()) {
        headers.insert(header::HeaderName::from_static(HEADER_ESCROW), id.clone());
        headers.insert(header::HeaderName::from_static(HEADER_DEVSHARD_ID), id);
    }
    res
}

/// Ends the record of a tracked request that did not answer 200 (200s end with their body).
fn record_failure(state: &AppState, rid: &str, result: &Result<HttpResponse, ApiError>) {
    let (status, code, message) = match result {
        Ok(res) if res.status().is_success() => return,
        Ok(res) => (res.status().as_u16(), "refused".to_string(), String::new()),
        Err(e) => (e.parts().status, e.parts().code, e.to_string()),
    };
    let outcome = Outcome::Failed {
        status,
        code,
        message,
    };
    state
        .accounting
        .finish(rid, outcome, None, state.clock.now_ms());
}

/// The `Idempotency-Key` header (1..=255 visible ASCII characters), if any.
fn idempotency_key(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(v) = req.headers().get(HEADER_IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    match v.to_str().map(str::trim) {
        Ok(s) if !s.is_empty() && s.len() <= 255 && s.bytes().all(|b| b.is_ascii_graphic()) => {
            Ok(Some(s.to_string()))
        }
        _ => Err(ApiError::invalid(
            "Idempotency-Key",
            "invalid_value",
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        )),
    }
}

async fn chat_inner(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    rid: &str,
    log: &Logger,
    escrow: &mut Option<String>,
    tracked: &mut bool,
) -> Result<HttpResponse, ApiError> {
    let caller = access::identify(req, state)?;
    let raw = read_body(req, payload, state.limits.max_body_bytes).await?;
    let parsed = normalize::parse(&raw, state.limits.chat)?;
    // PostgreSQL replicas: no usable escrow of the model here → its owner serves it.
    if let Some(res) =
        forward::chat_elsewhere(req, state, parsed.model.as_deref(), raw.clone(), rid, log).await?
    {
        return Ok(res);
    }
    let model = normalize::choose_model(
        parsed.model.as_deref(),
        &state.board.load().models,
        state.limits.default_model.as_deref(),
    )?;
    let chat = normalize::finish(parsed, model, &state.limits.shaping)?;
    if !chat.dropped.is_empty() {
        info!(log, "request keys dropped"; "stage" => "request_keys_dropped",
            "keys" => chat.dropped.join(","));
    }
    if let Err(denied) = access::authorize(&caller, &chat.model, state) {
        info!(log, "request refused by the model's access mode"; "stage" => "access_denied",
            "model" => &chat.model, "caller" => caller.label());
        return Ok(*denied);
    }
    let key = idempotency_key(req)?;
    // Only a retry with the same key can be answered from the table: nothing else keeps bytes.
    let replayable = key.is_some();
    let record = Record {
        request_id: rid.to_string(),
        fingerprint: fingerprint(&chat.model, &raw, &caller.label()),
        model: chat.model.clone(),
        caller: caller.label(),
        stream: chat.stream,
        idempotency_key: key,
        escrow: None,
        race_id: None,
        nonces: Vec::new(),
        attempts: Vec::new(),
        race_ended_at_ms: None,
        started_at_ms: state.clock.now_ms(),
        finished_at_ms: None,
        outcome: Outcome::InFlight,
        replays: 0,
        replay_truncated: false,
        stored: None,
    };
    match state.accounting.begin(record, state.clock.now_ms()) {
        Begin::Fresh => *tracked = true,
        Begin::KeyReused { request_id } => return Ok(accounting::key_reused(&request_id)),
        Begin::Join { request_id, done } => {
            info!(log, "idempotent retry joins its first request"; "stage" => "idempotent_join",
                "first" => &request_id);
            return Ok(accounting::replay(&state.accounting, &request_id, done, escrow).await);
        }
    }
    info!(log, "request received"; "stage" => "request_received", "model" => &chat.model,
        "stream" => chat.stream, "input_length" => chat.body.len(), "max_tokens" => chat.max_tokens);
    let relaxed = match gate::admit(state, &chat.model, log) {
        Ok(r) => r,
        Err(refused) => return Ok(refused.error_response()),
    };

    let Ok(permit) = state.races.clone().try_acquire_owned() else {
        state
            .metrics
            .rejections
            .with_label_values(&[REJECT_MAX_CONCURRENT])
            .inc();
        info!(log, "request shed: races in flight at the ceiling"; "stage" => "request_shed",
            "reason" => REJECT_MAX_CONCURRENT, "ceiling" => state.limits.max_concurrent_races);
        return Err(ApiError::Saturated {
            ceiling: state.limits.max_concurrent_races,
        });
    };
    let in_flight = InFlight::new(permit, state.metrics.races_in_flight.clone());
    let starting = state.overload.acquire().await.map_err(|shed| {
        info!(log, "request shed by the adaptive concurrency limit"; "stage" => "request_shed",
            "reason" => shed.reason.label(), "limit" => shed.limit);
        ApiError::Shed(shed)
    })?;
    let stream = chat.stream;
    let strip = chat.strip;
    let params = InferenceParams {
        request_id: rid.to_string(),
        model: chat.model,
        body: chat.body,
        prompt_hash: chat.prompt_hash,
        max_tokens: chat.max_tokens,
        stream,
        only_hosts: relaxed.as_ref().map(|r| r.only.clone()),
    };
    // The slot is freed at dispatch (opt-in) or held to the first byte (the default).
    let (dispatched, held) = if state.overload.releases_at_dispatch() {
        (starting.into_dispatch_hook(), None)
    } else {
        (starting.on_dispatch(), Some(starting))
    };
    let model = params.model.clone();
    let placed =
        match placement::place(state, Arc::new(params), escrow, Some(dispatched), log).await {
            Ok(started) => Ok(started),
            Err(Unplaced::Failed(e)) => Err(e),
            // PostgreSQL replicas: no escrow here could take it after all (the only one closed
            // between the route and the pick, or under its race) and no nonce was granted to it
            // here → an owner elsewhere serves it and records it; this replica forgets it.
            Err(Unplaced::Elsewhere(why)) => {
                let here = escrow.take();
                let after = (model.as_str(), &why);
                match forward::chat_after_local_refusal(req, state, after, raw, rid, log).await? {
                    AfterRefusal::Served(res) => {
                        placement::sent_elsewhere(state, &why, "forwarded", log);
                        state.accounting.abandon(rid);
                        *tracked = false;
                        return Ok(res);
                    }
                    AfterRefusal::HandBack => {
                        placement::sent_elsewhere(state, &why, "returned", log);
                        *escrow = here;
                        let refusal = gate::during_poc(relaxed.as_ref(), why.into_refusal(), log);
                        state.accounting.abandon(rid);
                        *tracked = false;
                        return Ok(forward::handed_back(state, &refusal, log));
                    }
                    AfterRefusal::Stays => {
                        *escrow = here;
                        Err(placement::refused_here(state, rid, why, log))
                    }
                }
            }
        };
    let started = placed.map_err(|e| gate::during_poc(relaxed.as_ref(), e, log))?;
    drop(held);
    info!(log, "response started"; "stage" => "response_started", "stream" => stream);
    Ok(match started {
        RaceStart::Stream(rx) => {
            accounting::recording_stream(rx, in_flight, state, rid, strip, replayable)
        }
        RaceStart::Whole(body) => {
            let body = strip.json(body);
            drop(in_flight);
            let stored = Stored {
                content_type: "application/json",
                bytes: body.clone(),
            };
            let outcome = Outcome::Completed { status: 200 };
            let now = state.clock.now_ms();
            if !replayable {
                state.accounting.finish(rid, outcome, None, now);
            } else if body.len() > state.accounting.config().max_replay_bytes {
                state.accounting.finish_truncated(rid, outcome, now);
            } else {
                state.accounting.finish(rid, outcome, Some(stored), now);
            }
            HttpResponse::Ok()
                .insert_header((header::CONTENT_TYPE, "application/json"))
                .body(body)
        }
    })
}
