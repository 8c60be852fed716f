//! `GET /debug/ui` is served without auth as a self-contained HTML page (the browser test in
//! `tests/ui/run.sh` checks what it renders against a running demo).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use actix_web::{http::StatusCode, test, App};

#[actix_web::test]
async fn debug_ui_is_html_without_auth() {
    let app = test::init_service(App::new().configure(devshard_gateway::http::configure)).await;
    let resp =
        test::call_service(&app, test::TestRequest::get().uri("/debug/ui").to_request()).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let ctype = resp
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(ctype.starts_with("text/html"), "{ctype}");
    assert!(resp.headers().contains_key("content-security-policy"));
    let body = String::from_utf8(test::read_body(resp).await.to_vec()).unwrap();
    assert!(body.contains("/v1/debug/actors"));
    assert!(body.contains("data-escrow-id") && body.contains("data-participant"));
    assert!(body.contains("/v1/debug/series") && body.contains("data-chart"));
    assert!(
        body.contains("<svg") && body.contains("data-endpoint"),
        "charts and the chain table"
    );
    assert!(
        body.contains("data-limiter"),
        "the overload limiter's table"
    );
    // No external assets.
    assert!(!body.contains("src=\"http") && !body.contains("href=\"http"));

    let post = test::TestRequest::post().uri("/debug/ui").to_request();
    let resp = test::call_service(&app, post).await;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
}
