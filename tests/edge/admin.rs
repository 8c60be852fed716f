//! Admin surface: off (404) without a key, 401 with a missing/wrong key, escrow CRUD with one.

use actix_web::{http::StatusCode, test};
use serde_json::json;

use crate::support::{call, error_fields, escrow_info, gateway, Opts, ESCROW, MODEL};

const KEY: &str = "admin-key";

fn authed(req: test::TestRequest) -> test::TestRequest {
    req.insert_header(("authorization", format!("Bearer {KEY}")))
}

#[actix_web::test]
async fn admin_is_off_without_a_key() {
    let state = gateway(Opts {
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let reqs = [
        test::TestRequest::get().uri("/v1/admin/escrows"),
        test::TestRequest::post()
            .uri("/v1/admin/escrows")
            .set_payload(r#"{"escrow_id":"1"}"#),
        test::TestRequest::delete().uri("/v1/admin/escrows/42"),
        test::TestRequest::get().uri("/v1/admin/whatever"),
        authed(test::TestRequest::get().uri("/v1/admin/escrows")),
    ];
    for req in reqs {
        let (status, _, body) = call(&app, req.to_request()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        error_fields(&body);
    }
}

#[actix_web::test]
async fn admin_needs_the_right_bearer() {
    let state = gateway(Opts {
        admin: Some(KEY),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    for auth in [
        None,
        Some("Bearer nope"),
        Some(KEY),
        Some("Basic YWRtaW4ta2V5"),
    ] {
        let mut req = test::TestRequest::get().uri("/v1/admin/escrows");
        if let Some(a) = auth {
            req = req.insert_header(("authorization", a));
        }
        let (status, _, body) = call(&app, req.to_request()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(
            body,
            json!({"error": {"message": "Invalid admin API key.", "type": "invalid_request_error",
                "param": null, "code": "invalid_api_key"}})
        );
    }
    let (status, _, body) = call(
        &app,
        authed(test::TestRequest::get().uri("/v1/admin/escrows")).to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"], json!([]));
}

#[actix_web::test]
async fn list_get_and_delete_escrows() {
    let state = gateway(Opts {
        admin: Some(KEY),
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, body) = call(
        &app,
        authed(test::TestRequest::get().uri("/v1/admin/escrows")).to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let e = &body["data"][0];
    assert_eq!(e["escrow_id"], ESCROW);
    assert_eq!(e["model"], MODEL);
    assert_eq!(e["group_size"], 3);
    assert_eq!(e["actor"]["alive"], true);
    assert_eq!(e["snapshot"]["escrow_id"], ESCROW);
    assert!(e["snapshot"]["nonce"].is_u64());

    let one = authed(test::TestRequest::get().uri("/v1/admin/escrows/42"));
    let (status, _, body) = call(&app, one.to_request()).await;
    assert_eq!(
        (status, &body["escrow_id"]),
        (StatusCode::OK, &json!(ESCROW))
    );
    let missing = authed(test::TestRequest::get().uri("/v1/admin/escrows/7"));
    let (status, _, _) = call(&app, missing.to_request()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let del = authed(test::TestRequest::delete().uri("/v1/admin/escrows/7"));
    let (status, _, body) = call(&app, del.to_request()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_fields(&body).1, "escrow_not_found");
    let del = authed(test::TestRequest::delete().uri("/v1/admin/escrows/42"));
    let (status, _, body) = call(&app, del.to_request()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_fields(&body).1, "escrow_not_settled");
    let del = authed(test::TestRequest::delete().uri("/v1/admin/escrows/42?force=true&purge=true"));
    let (status, _, body) = call(&app, del.to_request()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"escrow_id": ESCROW, "deleted": true, "purged": true, "reason": "unused", "nonce": 0})
    );
    let (_, _, body) = call(
        &app,
        authed(test::TestRequest::get().uri("/v1/admin/escrows")).to_request(),
    )
    .await;
    assert_eq!(body["data"], json!([]));
    let (_, _, body) = call(
        &app,
        test::TestRequest::get().uri("/v1/models").to_request(),
    )
    .await;
    assert_eq!(body["data"], json!([]));
}

#[actix_web::test]
async fn add_escrow_validates_and_reports_chain_errors() {
    let state = gateway(Opts {
        admin: Some(KEY),
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let cases = [
        ("{", StatusCode::BAD_REQUEST, "invalid_value"),
        (r#"{"id":"1"}"#, StatusCode::BAD_REQUEST, "invalid_value"),
        (
            r#"{"escrow_id":"abc"}"#,
            StatusCode::BAD_REQUEST,
            "invalid_escrow_id",
        ),
        // The test chain URL refuses connections.
        (
            r#"{"escrow_id":"43"}"#,
            StatusCode::BAD_GATEWAY,
            "chain_unavailable",
        ),
    ];
    for (body, status, code) in cases {
        let req = authed(
            test::TestRequest::post()
                .uri("/v1/admin/escrows")
                .set_payload(body),
        );
        let (got, _, json) = call(&app, req.to_request()).await;
        assert_eq!(got, status, "{body}: {json}");
        assert_eq!(error_fields(&json).1, code, "{body}");
    }
    // Already registered: idempotent, no chain call needed.
    let req = authed(
        test::TestRequest::post()
            .uri("/v1/admin/escrows")
            .set_payload(r#"{"escrow_id":42}"#),
    );
    let (status, _, json) = call(&app, req.to_request()).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    assert_eq!(json["escrow_id"], ESCROW);
}
