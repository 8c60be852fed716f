//! `GET /openapi.json`: placeholder, filled below.
use actix_web::HttpResponse;

/// `GET /openapi.json`.
pub async fn document() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({}))
}
