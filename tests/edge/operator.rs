//! `GET /v1/admin/state` (no secrets) and `POST /v1/admin/escrows/{id}/deactivate|activate`.

use actix_web::{http::StatusCode, test as atest};
use serde_json::json;

use crate::support::{self, call, error_fields, escrow_info, gateway, Opts, ESCROW, MODEL};

fn admin(req: atest::TestRequest) -> atest::TestRequest {
    req.insert_header(("authorization", "Bearer admin-secret-key"))
}

#[actix_web::test]
async fn admin_state_shows_settings_and_escrows_without_secrets() {
    let state = gateway(Opts {
        admin: Some("admin-secret-key"),
        api_keys: vec!["user-secret-key"],
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = atest::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, _) = call(
        &app,
        atest::TestRequest::get()
            .uri("/v1/admin/state")
            .to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let req = admin(atest::TestRequest::get().uri("/v1/admin/state")).to_request();
    let (status, _, body) = call(&app, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["settings"]["access"]["default_mode"], "api_key");
    assert_eq!(body["settings"]["api_keys_configured"], 1);
    assert_eq!(body["escrows"][0]["escrow_id"], ESCROW, "{body}");
    assert_eq!(body["escrows"][0]["active"], true);
    assert!(body["escrows"][0]["snapshot"]["nonce"].is_u64(), "{body}");
    assert!(body["participants"]["total"].is_u64());
    let text = body.to_string();
    for secret in [
        "admin-secret-key",
        "user-secret-key",
        support::key().secret_hex().as_str(),
    ] {
        assert!(!text.contains(secret), "secret leaked in {text}");
    }
}

#[actix_web::test]
async fn a_deactivated_escrow_gets_no_new_requests() {
    let state = gateway(Opts {
        admin: Some("admin-secret-key"),
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let before = support::snapshot(&state.directory, ESCROW).await;
    let app = atest::init_service(devshard_gateway::app::build_app(state.clone())).await;
    let uri = format!("/v1/admin/escrows/{ESCROW}/deactivate");
    let (status, _, body) = call(
        &app,
        admin(atest::TestRequest::post().uri(&uri)).to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["active"], false);
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    let req = atest::TestRequest::post()
        .uri("/v1/chat/completions")
        .insert_header(("content-type", "application/json"))
        .set_payload(serde_json::to_vec(&chat).unwrap())
        .to_request();
    let (status, _, body) = call(&app, req).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(error_fields(&body).1, "no_active_escrow");
    let after = support::snapshot(&state.directory, ESCROW).await;
    assert_eq!(before.nonce, after.nonce, "no nonce consumed");
    let req = admin(atest::TestRequest::get().uri("/v1/admin/state")).to_request();
    let (_, _, body) = call(&app, req).await;
    assert_eq!(body["deactivated_escrows"], json!([ESCROW]));
    let uri = format!("/v1/admin/escrows/{ESCROW}/activate");
    let (status, _, body) = call(
        &app,
        admin(atest::TestRequest::post().uri(&uri)).to_request(),
    )
    .await;
    assert_eq!(
        (status, body["active"].clone()),
        (StatusCode::OK, json!(true))
    );
    let uri = "/v1/admin/escrows/999/deactivate";
    let (status, _, _) = call(
        &app,
        admin(atest::TestRequest::post().uri(uri)).to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
