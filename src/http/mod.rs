//! The HTTP edge (actix-web): routes ([`configure`], one 405 per resource registered once by
//! `resource`), request ids, body reading and bearer-key checks shared by the handlers.
//! Handlers live one resource family per file; every module:
//!
//! - [`openai`]: `POST /v1/chat/completions` (streaming and not);
//! - [`normalize`]: the pure request checks and normalisation (model, `max_tokens`, prompt hash);
//! - [`sse`]: the streaming response body;
//! - [`access`]: per-model access control of chat requests;
//! - [`gate`]: phase gating of new chat requests during PoC;
//! - [`accounting`]: idempotent replays, the recording stream;
//! - [`ledger`]: `GET /v1/requests/{request_id}` (admin key or the API key that made it) and
//!   `GET /v1/admin/ledger` (the cost ledger export);
//! - [`settlement`]: settle, finalize, settlement and signatures/collect of `/v1/admin/escrows/{id}`;
//! - [`status`]: `GET /v1/status` (the Go gateway's gateway-mode shape);
//! - [`filter`], [`messages`], [`shaping`]: the OpenAI request filter pipeline, message checks,
//!   and the logprobs forcing/stripping;
//! - [`operator`]: `GET /v1/admin/state`, escrow deactivate/activate, the escrow choice;
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`, `/v1/models`;
//! - [`admin`]: `/v1/admin/escrows…` and the admin-key guard;
//! - [`escrow_delete`]: `DELETE /v1/admin/escrows/{id}` (settled, or never used with `force`);
//! - [`escrow_adopt`]: adopting a live escrow from its hosts' diffs (`"adopt": true`);
//! - [`participants`]: `/v1/admin/participants…` (health, unquarantine, forget, eject);
//! - [`settings`]: `GET/PUT /v1/admin/settings` (admin);
//! - [`debug`]: every `/v1/debug/…` route (actors, escrows, chain, series; admin);
//! - [`openapi`]: `GET /openapi.json`;
//! - [`ui`]: `GET /debug/ui`, the operator page;
//! - [`forward`]: PostgreSQL replicas: chat requests and escrow admin calls sent to the replica
//!   that owns the escrow;
//! - [`error`]: the one mapping of every error to a status and an OpenAI-shaped answer.

pub mod access;
pub mod accounting;
pub mod admin;
pub mod debug;
pub mod debug_chain;
pub mod debug_settlement;
pub mod error;
pub mod escrow_adopt;
pub mod escrow_create;
pub mod escrow_delete;
pub mod filter;
pub mod forward;
pub mod gate;
pub mod ledger;
pub mod messages;
pub mod normalize;
pub mod openai;
pub mod openapi;
pub mod operator;
pub mod ops;
pub mod participants;
pub mod placement;
pub mod readiness;
pub mod settings;
pub mod settlement;
pub mod shaping;
pub mod sse;
pub mod status;
pub mod ui;

use std::sync::atomic::Ordering;

use actix_web::{
    http::header,
    middleware::from_fn,
    web::{self, Bytes, BytesMut},
    HttpRequest, HttpResponse, ResponseError,
};
use futures::StreamExt;

use self::error::ApiError;
use crate::{config::secret::constant_time_eq, state::AppState};

/// Request id header (honoured when sane, generated otherwise, echoed on every chat answer).
pub const HEADER_REQUEST_ID: &str = "x-request-id";
/// Escrow that served (or was picked for) a chat request.
pub const HEADER_ESCROW: &str = "x-devshard-escrow";
/// Upstream name of [`HEADER_ESCROW`], sent too so Go-gateway clients keep working.
pub const HEADER_DEVSHARD_ID: &str = "x-devshard-id";
/// Longest client-supplied request id we keep.
const MAX_REQUEST_ID_LEN: usize = 128;

/// A resource that answers 405 (OpenAI-shaped) to every method it has no route for: the one
/// place 405s are registered.
fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

/// Registers every route of the gateway.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/v1/chat/completions").route(web::post().to(openai::chat)))
        .service(resource("/v1/requests/{request_id}").route(web::get().to(ledger::get_request)))
        .service(resource("/v1/status").route(web::get().to(status::status)))
        .service(resource("/openapi.json").route(web::get().to(openapi::document)))
        .service(resource("/v1/models").route(web::get().to(ops::models)))
        .service(resource("/healthz").route(web::get().to(ops::healthz)))
        .service(resource("/readyz").route(web::get().to(ops::readyz)))
        .service(resource("/debug/ui").route(web::get().to(ui::page)))
        .service(resource("/metrics").route(web::get().to(ops::metrics)))
        .service(
            web::scope("/v1/admin")
                .wrap(from_fn(forward::escrow_calls))
                .wrap(from_fn(admin::require_admin))
                .service(
                    resource("/escrows")
                        .route(web::get().to(admin::list_escrows))
                        .route(web::post().to(admin::add_escrow)),
                )
                .service(
                    resource("/escrows/{id}")
                        .route(web::get().to(admin::get_escrow))
                        .route(web::delete().to(escrow_delete::delete_escrow)),
                )
                .service(resource("/participants").route(web::get().to(participants::list)))
                .service(
                    resource("/participants/unquarantine")
                        .route(web::post().to(participants::unquarantine)),
                )
                .service(
                    resource("/participants/forget").route(web::post().to(participants::forget)),
                )
                .service(resource("/participants/eject").route(web::post().to(participants::eject)))
                .service(
                    resource("/escrows/{id}/participants/{address}/repair")
                        .route(web::post().to(admin::trigger_repair)),
                )
                .service(resource("/escrows/{id}/sync").route(web::post().to(admin::sync_escrow)))
                .service(resource("/escrows/{id}/settle").route(web::post().to(settlement::settle)))
                .service(
                    resource("/escrows/{id}/finalize").route(web::post().to(settlement::finalize)),
                )
                .service(resource("/escrows/{id}/settlement").route(web::get().to(settlement::get)))
                .service(
                    resource("/escrows/{id}/signatures/collect")
                        .route(web::post().to(settlement::collect)),
                )
                .service(resource("/ledger").route(web::get().to(ledger::export)))
                .service(resource("/rotation").route(web::get().to(escrow_create::rotation)))
                .service(resource("/state").route(web::get().to(operator::admin_state)))
                .service(
                    resource("/escrows/{id}/deactivate")
                        .route(web::post().to(operator::deactivate)),
                )
                .service(
                    resource("/escrows/{id}/activate").route(web::post().to(operator::activate)),
                )
                .service(
                    resource("/settings")
                        .route(web::get().to(settings::get_settings))
                        .route(web::put().to(settings::put_settings)),
                )
                .default_service(web::to(not_found)),
        )
        .service(
            web::scope("/v1/debug")
                .wrap(from_fn(forward::escrow_calls))
                .wrap(from_fn(admin::require_admin))
                .service(resource("/chain").route(web::get().to(debug_chain::debug_chain)))
                .service(resource("/series").route(web::get().to(debug_chain::series)))
                .service(resource("/actors").route(web::get().to(debug::actors)))
                .service(resource("/actors/{kind}/{id}").route(web::get().to(debug::actor)))
                .service(resource("/escrows/{id}").route(web::get().to(debug::escrow)))
                .default_service(web::to(not_found)),
        );
}

/// 404 for every unknown route.
pub async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::NotFound(format!("no route for {} {}", req.method(), req.path())).error_response()
}

/// 405 for a known route with the wrong method.
pub async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    ApiError::MethodNotAllowed(req.method().to_string()).error_response()
}

/// The client's `X-Request-Id` when it is 1..=128 visible ASCII characters without spaces, else
/// a fresh `req-<unix nanos>-<seq>` (the upstream format).
pub fn request_id(req: &HttpRequest, state: &AppState) -> String {
    let given = req
        .headers()
        .get(HEADER_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| {
            !s.is_empty()
                && s.len() <= MAX_REQUEST_ID_LEN
                && s.bytes().all(|b| b.is_ascii_graphic())
        });
    match given {
        Some(s) => s.to_string(),
        None => {
            let seq = state.request_seq.fetch_add(1, Ordering::Relaxed);
            let nanos = state.clock.now_ms().saturating_mul(1_000_000);
            format!("req-{nanos}-{seq}")
        }
    }
}

/// The bearer token of `Authorization`, if any.
pub fn bearer(req: &HttpRequest) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// True when `token` equals one of `keys` (each compared in constant time).
pub fn key_matches<'a>(token: &str, keys: impl IntoIterator<Item = &'a str>) -> bool {
    keys.into_iter().fold(false, |hit, k| {
        hit | constant_time_eq(token.as_bytes(), k.as_bytes())
    })
}

/// Reads a request body of at most `limit` bytes (413 beyond, announced or not).
pub async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > u64::try_from(limit).unwrap_or(u64::MAX)) {
        return Err(ApiError::BodyTooLarge { limit });
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest {
            message: format!("could not read the request body: {e}"),
            param: None,
            code: "invalid_body",
        })?;
        if buf.len().saturating_add(chunk.len()) > limit {
            return Err(ApiError::BodyTooLarge { limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
