//! The HTTP edge (actix-web): routes, request ids, body reading and bearer-key checks shared by
//! the handlers. Handlers live one resource family per file:
//! - [`openai`]: `POST /v1/chat/completions` (streaming and not), with [`normalize`] for the
//!   pure request checks and [`sse`] for the streaming body;
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`, `/v1/models`;
//! - [`admin`]: `/v1/admin/escrows…` behind the admin key;
//! - [`settings`]: `GET/PUT /v1/admin/settings` (admin);
//! - [`gate`]: phase gating of new chat requests during PoC, and `GET /v1/debug/chain` (admin);
//! - [`error`]: the one mapping of every error to an OpenAI-shaped answer.

pub mod access;
pub mod accounting;
pub mod admin;
pub mod debug;
pub mod error;
pub mod gate;
pub mod normalize;
pub mod openai;
pub mod openapi;
pub mod operator;
pub mod ops;
pub mod participants;
pub mod settings;
pub mod settlement;
pub mod sse;
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
use crate::{app::AppState, config::secret::constant_time_eq};

/// Request id header (honoured when sane, generated otherwise, echoed on every chat answer).
pub const HEADER_REQUEST_ID: &str = "x-request-id";
/// Escrow that served (or was picked for) a chat request.
pub const HEADER_ESCROW: &str = "x-devshard-escrow";
/// Upstream name of [`HEADER_ESCROW`], sent too so Go-gateway clients keep working.
pub const HEADER_DEVSHARD_ID: &str = "x-devshard-id";
/// Longest client-supplied request id we keep.
const MAX_REQUEST_ID_LEN: usize = 128;

/// Registers every route of the gateway.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/chat/completions")
            .route(web::post().to(openai::chat))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/v1/requests/{request_id}")
            .wrap(from_fn(admin::require_admin))
            .route(web::get().to(accounting::get_request))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/openapi.json")
            .route(web::get().to(openapi::document))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/v1/models")
            .route(web::get().to(ops::models))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/healthz")
            .route(web::get().to(ops::healthz))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/readyz")
            .route(web::get().to(ops::readyz))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/debug/ui")
            .route(web::get().to(ui::page))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/metrics")
            .route(web::get().to(ops::metrics))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::scope("/v1/admin")
            .wrap(from_fn(admin::require_admin))
            .service(
                web::resource("/escrows")
                    .route(web::get().to(admin::list_escrows))
                    .route(web::post().to(admin::add_escrow))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}")
                    .route(web::get().to(admin::get_escrow))
                    .route(web::delete().to(admin::delete_escrow))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/participants")
                    .route(web::get().to(participants::list))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/participants/unquarantine")
                    .route(web::post().to(participants::unquarantine))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/participants/forget")
                    .route(web::post().to(participants::forget))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/participants/eject")
                    .route(web::post().to(participants::eject))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/participants/{address}/repair")
                    .route(web::post().to(admin::trigger_repair))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/settle")
                    .route(web::post().to(settlement::settle))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/finalize")
                    .route(web::post().to(settlement::finalize))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/settlement")
                    .route(web::get().to(settlement::get))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/signatures/collect")
                    .route(web::post().to(settlement::collect))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/sync")
                    .route(web::post().to(admin::sync_escrow))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/state")
                    .route(web::get().to(operator::admin_state))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/deactivate")
                    .route(web::post().to(operator::deactivate))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}/activate")
                    .route(web::post().to(operator::activate))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/settings")
                    .route(web::get().to(settings::get_settings))
                    .route(web::put().to(settings::put_settings))
                    .default_service(web::to(method_not_allowed)),
            )
            .default_service(web::to(not_found)),
    )
    .service(
        web::scope("/v1/debug")
            .wrap(from_fn(admin::require_admin))
            .service(
                web::resource("/chain")
                    .route(web::get().to(gate::debug_chain))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/actors")
                    .route(web::get().to(debug::actors))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/actors/{kind}/{id}")
                    .route(web::get().to(debug::actor))
                    .default_service(web::to(method_not_allowed)),
            )
            .service(
                web::resource("/escrows/{id}")
                    .route(web::get().to(debug::escrow))
                    .default_service(web::to(method_not_allowed)),
            )
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
