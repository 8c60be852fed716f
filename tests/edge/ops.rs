//! `/healthz`, `/readyz`, `/metrics`, `/v1/models`, unknown routes and methods.

use actix_web::{http::StatusCode, test};
use serde_json::json;

use crate::support::{call, call_text, error_fields, escrow_info, gateway, Opts, ESCROW, MODEL};

#[actix_web::test]
async fn healthz_and_readyz() {
    let state = gateway(Opts::default()).await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, body) = call(&app, test::TestRequest::get().uri("/healthz").to_request()).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, headers, body) =
        call(&app, test::TestRequest::get().uri("/readyz").to_request()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(headers.contains_key("retry-after"));
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("no escrow actor is alive"),
        "{body}"
    );

    let state = gateway(Opts {
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, body) = call(&app, test::TestRequest::get().uri("/readyz").to_request()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["escrows_alive"], 1);
}

#[actix_web::test]
async fn models_lists_registered_models() {
    let state = gateway(Opts {
        escrows: vec![
            escrow_info("1", MODEL),
            escrow_info("2", MODEL),
            escrow_info("3", "other"),
        ],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, body) = call(
        &app,
        test::TestRequest::get().uri("/v1/models").to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![MODEL, "other"]);
    assert_eq!(body["data"][0]["object"], "model");
    assert_eq!(body["data"][0]["owned_by"], "gonka");
}

#[actix_web::test]
async fn metrics_are_prometheus_text_by_route_pattern() {
    let state = gateway(Opts {
        admin: Some("k"),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let req = test::TestRequest::post()
        .uri("/v1/chat/completions")
        .set_payload("{")
        .to_request();
    call(&app, req).await;
    let req = test::TestRequest::get()
        .uri("/v1/admin/escrows/12345")
        .insert_header(("authorization", "Bearer k"))
        .to_request();
    call(&app, req).await;
    let (status, headers, text) =
        call_text(&app, test::TestRequest::get().uri("/metrics").to_request()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert!(
        text.contains(
            r#"devshard_http_requests_total{method="POST",path="/v1/chat/completions",status="400"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"path="/v1/admin/escrows/{id}""#),
        "patterns, not raw paths: {text}"
    );
    assert!(!text.contains("12345"), "no ids in labels");
    assert!(text.contains("devshard_http_request_duration_seconds_bucket"));
    assert!(text.contains("devshard_gateway_inflight_requests 0"));
}

#[actix_web::test]
async fn unknown_routes_and_methods_are_openai_errors() {
    let state = gateway(Opts::default()).await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, body) = call(&app, test::TestRequest::get().uri("/nope").to_request()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_fields(&body).1, "not_found");
    let req = test::TestRequest::get()
        .uri("/v1/chat/completions")
        .to_request();
    let (status, _, body) = call(&app, req).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_fields(&body).1, "method_not_allowed");
}

#[actix_web::test]
async fn stream_response_relays_bytes_with_sse_headers_and_releases_the_permit() {
    use std::sync::Arc;

    use bytes::Bytes;
    use devshard_gateway::http::sse::{stream_response, InFlight};
    use tokio::sync::{mpsc, Semaphore};

    let permits = Arc::new(Semaphore::new(1));
    let gauge = prometheus::IntGauge::new("g", "g").unwrap();
    let guard = InFlight::new(permits.clone().try_acquire_owned().unwrap(), gauge.clone());
    assert_eq!((gauge.get(), permits.available_permits()), (1, 0));
    let (tx, rx) = mpsc::channel(4);
    tx.send(Bytes::from_static(b"data: {\"a\":1}\n\n"))
        .await
        .unwrap();
    tx.send(Bytes::from_static(b"data: [DONE]\n\n"))
        .await
        .unwrap();
    drop(tx);
    let res = stream_response(rx, guard);
    assert_eq!(res.status(), StatusCode::OK);
    let h = res.headers();
    assert_eq!(h.get("content-type").unwrap(), "text/event-stream");
    assert_eq!(h.get("cache-control").unwrap(), "no-cache");
    assert_eq!(h.get("content-encoding").unwrap(), "identity");
    let body = actix_web::body::to_bytes(res.into_body()).await.unwrap();
    assert_eq!(&body[..], b"data: {\"a\":1}\n\ndata: [DONE]\n\n");
    assert_eq!((gauge.get(), permits.available_permits()), (0, 1));
}
