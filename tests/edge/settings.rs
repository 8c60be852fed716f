//! `GET/PUT /v1/admin/settings` on the in-process app (memory store, no poller): partial merge,
//! validation errors naming every field, unknown keys and sections, wrong types, auth, and what
//! is persisted.

use actix_web::{http::StatusCode, test};
use devshard_actors::{
    chain::ChainPollSettings, directory::GetHealthSettings, policy::settings::HealthSettings,
    store::ns,
};
use serde_json::{json, Value};

use crate::support::{call, error_fields, gateway, Opts};

const KEY: &str = "admin-key";

fn get() -> test::TestRequest {
    test::TestRequest::get()
        .uri("/v1/admin/settings")
        .insert_header(("authorization", format!("Bearer {KEY}")))
}

fn put(body: Value) -> test::TestRequest {
    test::TestRequest::put()
        .uri("/v1/admin/settings")
        .insert_header(("authorization", format!("Bearer {KEY}")))
        .set_payload(body.to_string())
}

fn defaults() -> Value {
    json!({"health": HealthSettings::default(), "chain_poll": ChainPollSettings::default(),
        "rotation": devshard_gateway::rotation::settings::RotationSettings::default()})
}

/// The `field`s of a 400's `errors`, after checking the OpenAI shape and that the message lists
/// every one of them.
fn rejected_fields(body: &Value) -> Vec<String> {
    let (kind, _, param) = error_fields(body);
    assert_eq!(kind, "invalid_request_error");
    let errors = body["error"]["errors"].as_array().expect("errors list");
    let fields: Vec<String> = errors
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(param, json!(fields[0]), "param is the first field: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    for (f, e) in fields.iter().zip(errors) {
        assert!(message.contains(f.as_str()), "{f} not in {message}");
        assert!(!e["message"].as_str().unwrap().is_empty());
    }
    fields
}

#[actix_web::test]
async fn get_shows_the_settings_in_force_and_put_merges_partially() {
    let state = gateway(Opts {
        admin: Some(KEY),
        ..Opts::default()
    })
    .await;
    let directory = state.directory.clone();
    let store = state.store.clone();
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;

    let (status, _, body) = call(&app, get().to_request()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, defaults());

    let (status, _, body) = call(
        &app,
        put(json!({"health": {"hedge_budget": 0.1}})).to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut want = defaults();
    want["health"]["hedge_budget"] = json!(0.1);
    assert_eq!(body, want, "only hedge_budget changed");
    let live = directory.send(GetHealthSettings).await.unwrap();
    assert_eq!(live.hedge_budget, 0.1, "applied to the directory");
    let stored = store.get(ns::SETTINGS, "health").unwrap().unwrap();
    assert_eq!(stored["hedge_budget"], 0.1, "persisted");

    let patch = json!({"chain_poll": {"chain_phase_poll_interval_ms": 30000, "poc_request_mode": "relaxed"}});
    let (status, _, body) = call(&app, put(patch).to_request()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    want["chain_poll"]["chain_phase_poll_interval_ms"] = json!(30000);
    want["chain_poll"]["poc_request_mode"] = json!("relaxed");
    assert_eq!(body, want, "health kept, chain_poll merged");
    let stored = store.get(ns::SETTINGS, "chain_poll").unwrap().unwrap();
    assert_eq!(
        stored,
        json!({"chain_phase_poll_interval_ms": 30000, "poc_request_mode": "relaxed"}),
        "only the fields an admin sent are persisted"
    );
    let (_, _, body) = call(&app, get().to_request()).await;
    assert_eq!(body, want);

    // Both sections at once; an empty object changes nothing.
    let both = json!({"health": {"max_attempts": 4}, "chain_poll": {"participants_poll_interval_ms": 90000}});
    let (status, _, body) = call(&app, put(both).to_request()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["health"]["max_attempts"], 4);
    assert_eq!(body["chain_poll"]["participants_poll_interval_ms"], 90000);
    let (status, _, same) = call(&app, put(json!({})).to_request()).await;
    assert_eq!((status, same), (StatusCode::OK, body));

    // `null` resets a field: health to its default, chain_poll to the configured value (here the
    // default), and drops the persisted chain_poll change.
    let reset = json!({"health": {"hedge_budget": null}, "chain_poll": {"poc_request_mode": null}});
    let (status, _, body) = call(&app, put(reset).to_request()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["health"]["hedge_budget"], 0.05);
    assert_eq!(body["health"]["max_attempts"], 4, "other fields kept");
    assert_eq!(body["chain_poll"]["poc_request_mode"], "off");
    let stored = store.get(ns::SETTINGS, "chain_poll").unwrap().unwrap();
    assert_eq!(
        stored,
        json!({"chain_phase_poll_interval_ms": 30000, "participants_poll_interval_ms": 90000})
    );
}

#[actix_web::test]
async fn invalid_values_are_400_naming_every_field_and_change_nothing() {
    let state = gateway(Opts {
        admin: Some(KEY),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let cases = [
        (
            json!({"health": {"hedge_budget": 2.0, "eject_strikes": 0.5}}),
            vec!["health.eject_strikes", "health.hedge_budget"],
        ),
        (
            json!({"health": {"receipt_timeout_ms": 100}}),
            vec!["health.receipt_timeout_ms"],
        ),
        // The budget check: epochs every second alone would need 66/min.
        (
            json!({"chain_poll": {"chain_phase_poll_interval_ms": 1000}}),
            vec!["chain_poll.chain_phase_poll_interval_ms"],
        ),
        (
            json!({"chain_poll": {"poll_jitter_percent": 80}}),
            vec!["chain_poll.poll_jitter_percent"],
        ),
        (
            json!({"health": {"max_attempts": "three", "hedge_burst": -1}}),
            vec!["health.max_attempts", "health.hedge_burst"],
        ),
        (
            json!({"chain_poll": {"poc_request_mode": "sometimes"}}),
            vec!["chain_poll.poc_request_mode"],
        ),
        (
            json!({"health": {"hedge_budget": 0.5}, "chain_poll": {"public_api_requests_per_minute": 0}}),
            vec!["chain_poll.public_api_requests_per_minute"],
        ),
        (
            json!({"chain_poll": {"poll_jitter_percent": 80, "poll_timeout_ms": 5}}),
            vec![
                "chain_poll.poll_jitter_percent",
                "chain_poll.poll_timeout_ms",
            ],
        ),
        // Each fine alone, too many requests together.
        (
            json!({"chain_poll": {"chain_phase_poll_interval_ms": 15000, "participants_poll_interval_ms": 30000}}),
            vec!["chain_poll.public_api_requests_per_minute"],
        ),
        (json!({"health": 5}), vec!["health"]),
    ];
    for (patch, want) in cases {
        let (status, _, body) = call(&app, put(patch.clone()).to_request()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}: {body}");
        assert_eq!(rejected_fields(&body), want, "{patch}: {body}");
        assert_eq!(body["error"]["code"], "invalid_value");
    }
    let (_, _, body) = call(&app, get().to_request()).await;
    assert_eq!(body, defaults(), "no rejected PUT changed anything");
}

#[actix_web::test]
async fn unknown_keys_and_bad_bodies_are_400() {
    let state = gateway(Opts {
        admin: Some(KEY),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    let cases = [
        (
            json!({"health": {"hedge_budgt": 0.1}}),
            "health.hedge_budgt",
        ),
        (
            json!({"chain_poll": {"interval": 5}, "health": {"hedge_budget": 0.2}}),
            "chain_poll.interval",
        ),
        (json!({"healt": {"hedge_budget": 0.1}}), "healt"),
    ];
    for (patch, field) in cases {
        let (status, _, body) = call(&app, put(patch.clone()).to_request()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{patch}: {body}");
        assert_eq!(rejected_fields(&body), vec![field.to_string()]);
        assert_eq!(body["error"]["code"], "unknown_setting", "{body}");
    }
    for raw in ["not json", "[1,2]", "\"x\""] {
        let req = put(Value::Null).set_payload(raw);
        let (status, _, body) = call(&app, req.to_request()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw}");
        let (_, code, _) = error_fields(&body);
        assert_eq!(code, "invalid_json");
    }
    let (_, _, body) = call(&app, get().to_request()).await;
    assert_eq!(body, defaults());
    let (status, _, _) = call(
        &app,
        test::TestRequest::post()
            .uri("/v1/admin/settings")
            .insert_header(("authorization", format!("Bearer {KEY}")))
            .to_request(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[actix_web::test]
async fn settings_and_debug_need_the_admin_key() {
    let state = gateway(Opts {
        admin: Some(KEY),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(devshard_gateway::app::build_app(state)).await;
    for req in [
        test::TestRequest::get().uri("/v1/admin/settings"),
        test::TestRequest::put()
            .uri("/v1/admin/settings")
            .set_payload(r#"{"health":{"hedge_budget":0.3}}"#),
        test::TestRequest::get().uri("/v1/debug/chain"),
        test::TestRequest::get()
            .uri("/v1/debug/chain")
            .insert_header(("authorization", "Bearer wrong")),
    ] {
        let (status, _, body) = call(&app, req.to_request()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    // No public API configured: no poller to show.
    let req = test::TestRequest::get()
        .uri("/v1/debug/chain")
        .insert_header(("authorization", format!("Bearer {KEY}")));
    let (status, _, body) = call(&app, req.to_request()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("public_api_url"));

    let off = gateway(Opts::default()).await;
    let app = test::init_service(devshard_gateway::app::build_app(off)).await;
    for req in [
        get(),
        put(json!({})),
        test::TestRequest::get().uri("/v1/debug/chain"),
    ] {
        let (status, _, _) = call(&app, req.to_request()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "admin surface off");
    }
}
