//! `POST /v1/chat/completions`: every bad input is answered with the right status and OpenAI
//! error shape before any escrow is touched (no nonce consumed).

use actix_web::{http::StatusCode, test};
use serde_json::{json, Value};

use crate::support::{
    self, call, error_fields, escrow_info, gateway, Opts, BODY_LIMIT, ESCROW, MODEL,
};

const ROUTE: &str = "/v1/chat/completions";

fn post(body: impl Into<Vec<u8>>) -> test::TestRequest {
    test::TestRequest::post()
        .uri(ROUTE)
        .insert_header(("content-type", "application/json"))
        .set_payload(body.into())
}

fn chat(extra: Value) -> Vec<u8> {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::to_vec(&body).unwrap()
}

#[actix_web::test]
async fn bad_inputs_fail_before_the_escrow() {
    let state = gateway(Opts {
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let before = support::snapshot(&state.directory, ESCROW).await;
    let app = test::init_service(devshard_gateway::app::build_app(state.clone())).await;

    let cases: Vec<(Vec<u8>, StatusCode, &str, Value)> = vec![
        (
            b"{not json".to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            Value::Null,
        ),
        (
            b"[1,2]".to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
            Value::Null,
        ),
        (
            b"{}".to_vec(),
            StatusCode::BAD_REQUEST,
            "missing_required_parameter",
            json!("messages"),
        ),
        (
            br#"{"messages":[]}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("messages"),
        ),
        (
            br#"{"messages":"hi"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("messages"),
        ),
        (
            chat(json!({"max_tokens": 0})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("max_tokens"),
        ),
        (
            chat(json!({"max_tokens": -5})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("max_tokens"),
        ),
        (
            chat(json!({"max_tokens": 1.5})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("max_tokens"),
        ),
        (
            chat(json!({"max_tokens": "10"})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("max_tokens"),
        ),
        (
            chat(json!({"max_tokens": 4097})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("max_tokens"),
        ),
        (
            chat(json!({"max_completion_tokens": 99999})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("max_completion_tokens"),
        ),
        (
            chat(json!({"stream": "yes"})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("stream"),
        ),
        (
            chat(json!({"model": 7})),
            StatusCode::BAD_REQUEST,
            "invalid_value",
            json!("model"),
        ),
        (
            chat(json!({"model": "gpt-nope"})),
            StatusCode::NOT_FOUND,
            "model_not_found",
            json!("model"),
        ),
        (
            vec![b' '; BODY_LIMIT + 1],
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            Value::Null,
        ),
    ];
    for (body, status, code, param) in cases {
        let text = String::from_utf8_lossy(&body[..body.len().min(60)]).into_owned();
        let (got, headers, json) = call(&app, post(body).to_request()).await;
        assert_eq!(got, status, "{text}: {json}");
        let (kind, got_code, got_param) = error_fields(&json);
        assert_eq!(kind, "invalid_request_error", "{text}");
        assert_eq!(got_code, code, "{text}: {json}");
        assert_eq!(got_param, param, "{text}: {json}");
        assert!(headers.contains_key("x-request-id"), "{text}");
        assert!(!headers.contains_key("x-devshard-escrow"), "{text}");
        assert_eq!(headers.get("content-type").unwrap(), "application/json");
    }

    let (_, _, json) = call(&app, post(chat(json!({"model": "gpt-nope"}))).to_request()).await;
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(MODEL),
        "404 lists the available models: {message}"
    );

    let after = support::snapshot(&state.directory, ESCROW).await;
    assert_eq!(after.nonce, before.nonce, "no nonce was consumed");
    assert_eq!(after.attempts_in_flight, 0);
    assert_eq!(after.waiting_races, 0);
}

#[actix_web::test]
async fn request_id_is_honoured_or_generated() {
    let state = gateway(Opts::default()).await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let req = post("{")
        .insert_header(("x-request-id", "client-id-1"))
        .to_request();
    let (_, headers, _) = call(&app, req).await;
    assert_eq!(headers.get("x-request-id").unwrap(), "client-id-1");
    let req = post("{")
        .insert_header(("x-request-id", "has space"))
        .to_request();
    let (_, headers, _) = call(&app, req).await;
    let id = headers.get("x-request-id").unwrap().to_str().unwrap();
    assert!(id.starts_with("req-"), "{id}");
}

#[actix_web::test]
async fn no_model_served_or_ambiguous_model_is_400() {
    let state = gateway(Opts::default()).await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, json) = call(&app, post(chat(json!({}))).to_request()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    assert_eq!(error_fields(&json).1, "model_required");

    let state = gateway(Opts {
        escrows: vec![escrow_info("1", "model-a"), escrow_info("2", "model-b")],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let (status, _, json) = call(&app, post(chat(json!({}))).to_request()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{json}");
    let (_, code, param) = error_fields(&json);
    assert_eq!((code.as_str(), param), ("model_required", json!("model")));
    assert!(json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("model-a"));
}

#[actix_web::test]
async fn api_keys_guard_chat_when_configured() {
    let state = gateway(Opts {
        api_keys: vec!["user-key"],
        admin: Some("admin-key"),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    for auth in [None, Some("Bearer wrong"), Some("user-key")] {
        let mut req = post("{");
        if let Some(a) = auth {
            req = req.insert_header(("authorization", a));
        }
        let (status, _, json) = call(&app, req.to_request()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}: {json}");
        assert_eq!(error_fields(&json).1, "invalid_api_key");
    }
    for key in ["Bearer user-key", "bearer admin-key"] {
        let req = post("{").insert_header(("authorization", key)).to_request();
        let (status, _, _) = call(&app, req).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{key} passes auth, then fails on JSON"
        );
    }
}

#[actix_web::test]
async fn saturation_is_503_gateway_saturated_with_retry_after_before_the_escrow() {
    let state = gateway(Opts {
        escrows: vec![escrow_info(ESCROW, MODEL)],
        max_concurrent_races: Some(1),
        ..Opts::default()
    })
    .await;
    let before = support::snapshot(&state.directory, ESCROW).await;
    let held = state.races.clone().try_acquire_owned().unwrap();
    let app = test::init_service(devshard_gateway::app::build_app(state.clone())).await;
    let (status, headers, json) = call(&app, post(chat(json!({}))).to_request()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert_eq!(headers.get("retry-after").unwrap(), "1");
    let (kind, code, _) = error_fields(&json);
    assert_eq!(
        (kind.as_str(), code.as_str()),
        ("service_unavailable", "gateway_saturated")
    );
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.contains("the gateway is saturated"), "{message}");
    drop(held);
    let after = support::snapshot(&state.directory, ESCROW).await;
    assert_eq!(after.nonce, before.nonce);
}

#[actix_web::test]
async fn race_failure_answers_with_the_escrow_header() {
    // Hosts refuse connections: the race fails before any byte and the error names the escrow.
    let state = gateway(Opts {
        escrows: vec![escrow_info(ESCROW, MODEL)],
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state.clone())).await;
    let (status, headers, json) =
        call(&app, post(chat(json!({"stream": true}))).to_request()).await;
    assert!(status.is_server_error(), "{status}: {json}");
    assert_eq!(headers.get("x-devshard-escrow").unwrap(), ESCROW);
    assert_eq!(headers.get("x-devshard-id").unwrap(), ESCROW);
    assert!(headers.contains_key("x-request-id"));
    error_fields(&json);
    assert_eq!(
        state.metrics.races_in_flight.get(),
        0,
        "permit and gauge released"
    );
    assert_eq!(state.races.available_permits(), 16);
}
