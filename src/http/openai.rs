//! `POST /v1/chat/completions`.
//!
//! Order of checks (every rejection happens before any escrow is touched): API key (when keys
//! are configured) → body size (413) → JSON, `messages`, token limits, `stream`, `model` type
//! (400, [`normalize::parse`]) → model among the served ones (404/400) → phase gating (503 +
//! `Retry-After` during PoC, [`gate::admit`]) → the concurrent-race limit (429) → escrow choice
//! (`PickEscrow`) → the race. The race starts here, inside the
//! handler, so that it lives on this worker's arbiter (awc is `!Send`).
//!
//! Answers: streaming → 200 `text/event-stream` with the race's bytes; non-streaming → 200 JSON;
//! a race failure before the first byte → its status with an OpenAI error body. Every answer
//! carries `X-Request-Id`, and `X-Devshard-Escrow` (+ upstream `X-Devshard-ID`) once an escrow
//! was picked.

use std::sync::{atomic::Ordering, Arc};

use actix_web::{
    http::header::{self, HeaderValue},
    web, HttpRequest, HttpResponse, ResponseError,
};
use devshard_actors::{
    directory::{ListModels, PickEscrow},
    escrow::messages::InferenceParams,
    race::{RaceActor, RaceError, RaceSpec, RaceStart},
};
use slog::{info, o, warn, Logger};

use super::{
    bearer,
    error::ApiError,
    gate, key_matches, normalize, read_body, request_id,
    sse::{stream_response, InFlight},
    HEADER_DEVSHARD_ID, HEADER_ESCROW, HEADER_REQUEST_ID,
};
use crate::{
    app::{AppState, ACTOR_TIMEOUT},
    metrics::REJECT_MAX_CONCURRENT,
};

/// The chat handler (see the module docs).
pub async fn chat(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let rid = request_id(&req, &state);
    let log = state.log.new(o!("request" => rid.clone()));
    let mut escrow: Option<String> = None;
    let result = chat_inner(&req, payload, &state, &rid, &log, &mut escrow).await;
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
    if let Some(id) = escrow.and_then(|id| HeaderValue::from_str(&id).ok()) {
        headers.insert(header::HeaderName::from_static(HEADER_ESCROW), id.clone());
        headers.insert(header::HeaderName::from_static(HEADER_DEVSHARD_ID), id);
    }
    res
}

/// 401 unless chat is open or the bearer is an API key (or the admin key).
fn check_api_key(req: &HttpRequest, state: &AppState) -> Result<(), ApiError> {
    let auth = &state.auth;
    if auth.api_keys.is_empty() {
        return Ok(());
    }
    let Some(token) = bearer(req) else {
        return Err(ApiError::Unauthorized(
            "missing API key: send Authorization: Bearer <key>",
        ));
    };
    let keys = auth
        .api_keys
        .iter()
        .chain(auth.admin.iter())
        .map(|k| k.expose());
    if key_matches(token, keys) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized("invalid API key"))
    }
}

async fn chat_inner(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    rid: &str,
    log: &Logger,
    escrow: &mut Option<String>,
) -> Result<HttpResponse, ApiError> {
    check_api_key(req, state)?;
    let raw = read_body(req, payload, state.limits.max_body_bytes).await?;
    let parsed = normalize::parse(&raw, state.limits.chat)?;
    let served = state
        .directory
        .send(ListModels)
        .timeout(ACTOR_TIMEOUT)
        .await?;
    let model = normalize::choose_model(
        parsed.model.as_deref(),
        &served,
        state.limits.default_model.as_deref(),
    )?;
    let chat = normalize::finish(parsed, model)?;
    info!(log, "request received"; "stage" => "request_received", "model" => &chat.model,
        "stream" => chat.stream, "input_length" => chat.body.len(), "max_tokens" => chat.max_tokens);
    if let Some(refused) = gate::admit(state, &chat.model, log) {
        return Ok(refused);
    }

    let Ok(permit) = state.races.clone().try_acquire_owned() else {
        state
            .metrics
            .rejections
            .with_label_values(&[REJECT_MAX_CONCURRENT])
            .inc();
        return Err(ApiError::Saturated);
    };
    let in_flight = InFlight::new(permit, state.metrics.races_in_flight.clone());
    let picked = state
        .directory
        .send(PickEscrow {
            model: chat.model.clone(),
        })
        .timeout(ACTOR_TIMEOUT)
        .await??;
    *escrow = Some(picked.escrow_id.clone());
    let race_id = state.race_ids.fetch_add(1, Ordering::Relaxed);
    info!(log, "escrow picked"; "stage" => "escrow_picked", "escrow" => &picked.escrow_id,
        "race" => race_id);
    let stream = chat.stream;
    let params = InferenceParams {
        request_id: rid.to_string(),
        model: chat.model,
        body: chat.body,
        prompt_hash: chat.prompt_hash,
        max_tokens: chat.max_tokens,
        stream,
    };
    let reply = RaceActor::start_race(RaceSpec {
        race_id,
        escrow_id: picked.escrow_id,
        escrow: picked.addr,
        directory: state.directory.clone(),
        params: Arc::new(params),
        limits: state.limits.race,
        clock: state.clock.clone(),
        log: state.log.clone(),
        metrics: state.actor_metrics.clone(),
    });
    let started = match reply.await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => {
            state.metrics.race_error(e.status);
            return Err(ApiError::Race(e));
        }
        Err(_) => {
            let e = RaceError {
                status: 502,
                kind: "upstream_error".into(),
                message: "the request's race ended without an answer".into(),
                retry_after_s: None,
            };
            state.metrics.race_error(e.status);
            return Err(ApiError::Race(e));
        }
    };
    info!(log, "response started"; "stage" => "response_started", "stream" => stream);
    Ok(match started {
        RaceStart::Stream(rx) => stream_response(rx, in_flight),
        RaceStart::Whole(body) => {
            drop(in_flight);
            HttpResponse::Ok()
                .insert_header((header::CONTENT_TYPE, "application/json"))
                .body(body)
        }
    })
}
