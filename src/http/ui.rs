//! `GET /debug/ui`: a self-contained HTML page (inline CSS and JS, no external assets) that polls
//! `GET /v1/debug/actors` and `GET /v1/debug/series` every second and shows charts of the last
//! 15 minutes (inline SVG: requests/s, TTFB p50/p99, errors by class, hedges and sheds,
//! participants by health state, per escrow nonces and balance left), then escrows,
//! participants by health state, races, repairs and the chain poller (a table: endpoint, age,
//! next poll, back-off, last status). Every table fits a 1280 px window.
//!
//! The page is served without auth and carries no data: it reads the admin key from the URL
//! fragment (`#key=…`, never sent to the server) or its text field and sends it as
//! `Authorization: Bearer …` on its own fetches.

use actix_web::{http::header, HttpResponse};

/// The page, embedded at build time.
const PAGE: &str = include_str!("ui.html");

/// Only inline style/script and same-origin fetches; no framing.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// `GET /debug/ui`.
pub async fn page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .body(PAGE)
}
