//! `GET /openapi.json` matches the routes served: every documented path/method reaches a
//! handler (not the unknown-route 404, not 405), and every served route is documented.

use actix_web::{http::Method, http::StatusCode, test as atest};

use crate::support::{call, escrow_info, gateway, Opts, ESCROW, MODEL};

/// The routes `http::configure` serves (kept by hand; a new route fails this test until it is
/// documented).
const SERVED: &[(&str, &str)] = &[
    ("post", "/v1/chat/completions"),
    ("get", "/v1/models"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/debug/ui"),
    ("get", "/openapi.json"),
    ("get", "/v1/status"),
    ("get", "/v1/requests/{request_id}"),
    ("get", "/v1/admin/state"),
    ("get", "/v1/admin/ledger"),
    ("get", "/v1/admin/escrows"),
    ("post", "/v1/admin/escrows"),
    ("get", "/v1/admin/escrows/{id}"),
    ("delete", "/v1/admin/escrows/{id}"),
    ("post", "/v1/admin/escrows/{id}/deactivate"),
    ("post", "/v1/admin/escrows/{id}/activate"),
    ("post", "/v1/admin/escrows/{id}/sync"),
    (
        "post",
        "/v1/admin/escrows/{id}/participants/{address}/repair",
    ),
    ("get", "/v1/admin/participants"),
    ("post", "/v1/admin/participants/unquarantine"),
    ("post", "/v1/admin/participants/forget"),
    ("post", "/v1/admin/participants/eject"),
    ("get", "/v1/admin/rotation"),
    ("get", "/v1/admin/settings"),
    ("put", "/v1/admin/settings"),
    ("get", "/v1/debug/chain"),
    ("get", "/v1/debug/series"),
    ("get", "/v1/debug/actors"),
    ("get", "/v1/debug/actors/{kind}/{id}"),
    ("get", "/v1/debug/escrows/{id}"),
];

#[actix_web::test]
async fn the_document_matches_the_served_routes() {
    let state = gateway(Opts {
        admin: Some("adm"),
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = atest::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, doc) = call(
        &app,
        atest::TestRequest::get().uri("/openapi.json").to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    for (m, p) in SERVED {
        assert!(
            documented.iter().any(|(dm, dp)| dm == m && dp == p),
            "{m} {p} is served but not documented"
        );
    }
    for (method, path) in &documented {
        let uri = path
            .replace("{request_id}", "req-x")
            .replace("{address}", "gonka1xyz")
            .replace("{kind}", "escrow")
            .replace("{id}", "999");
        let req = atest::TestRequest::default()
            .method(Method::from_bytes(method.to_uppercase().as_bytes()).unwrap())
            .uri(&uri)
            .insert_header(("authorization", "Bearer adm"))
            .insert_header(("content-type", "application/json"))
            .set_payload("{}")
            .to_request();
        let (status, _, body) = call(&app, req).await;
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}: {body}"
        );
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            !msg.starts_with("no route for"),
            "{method} {path} is documented but not served"
        );
    }
}
