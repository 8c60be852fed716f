//! Per-model access modes of `POST /v1/chat/completions`: `open`, `api_key`, `admin_only`, the
//! auto default, and the 401/403 shapes. The race permits are held so that an admitted request
//! stops at 503 `gateway_saturated` (after the access check) without touching the escrow.

use actix_web::{http::StatusCode, test as atest};
use devshard_gateway::config::{AccessConfig, AccessMode};
use serde_json::json;

use crate::support::{call, config, error_fields, escrow_info, gateway, Opts, ESCROW};

const OPEN: &str = "m/open";
const KEYED: &str = "m/keyed";
const ADMIN: &str = "m/admin";

fn opts(api_keys: Vec<&'static str>) -> Opts {
    Opts {
        admin: Some("admin-key"),
        api_keys,
        escrows: vec![
            escrow_info(ESCROW, OPEN),
            escrow_info("43", KEYED),
            escrow_info("44", ADMIN),
        ],
        max_concurrent_races: Some(1),
        ..Opts::default()
    }
}

fn access(default_mode: AccessMode) -> AccessConfig {
    AccessConfig {
        default_mode,
        models: [
            (OPEN.to_string(), AccessMode::Open),
            (KEYED.to_string(), AccessMode::ApiKey),
            (ADMIN.to_string(), AccessMode::AdminOnly),
        ]
        .into_iter()
        .collect(),
    }
}

fn req(model: &str, auth: Option<&str>) -> atest::TestRequest {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let mut r = atest::TestRequest::post()
        .uri("/v1/chat/completions")
        .insert_header(("content-type", "application/json"))
        .set_payload(serde_json::to_vec(&body).unwrap());
    if let Some(a) = auth {
        r = r.insert_header(("authorization", format!("Bearer {a}")));
    }
    r
}

#[actix_web::test]
async fn each_mode_admits_and_refuses_the_right_callers() {
    let mut state = gateway(opts(vec!["user-key"])).await;
    state.access = access(AccessMode::ApiKey);
    let _held = state.races.clone().try_acquire_many_owned(1).unwrap();
    let app = atest::init_service(devshard_gateway::app::build_app(state)).await;
    let admitted = StatusCode::SERVICE_UNAVAILABLE;
    let cases = [
        (OPEN, None, admitted, ""),
        (OPEN, Some("user-key"), admitted, ""),
        (OPEN, Some("admin-key"), admitted, ""),
        (
            OPEN,
            Some("wrong"),
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
        ),
        (KEYED, None, StatusCode::UNAUTHORIZED, "invalid_api_key"),
        (
            KEYED,
            Some("wrong"),
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
        ),
        (KEYED, Some("user-key"), admitted, ""),
        (KEYED, Some("admin-key"), admitted, ""),
        (ADMIN, None, StatusCode::UNAUTHORIZED, "invalid_api_key"),
        (
            ADMIN,
            Some("user-key"),
            StatusCode::FORBIDDEN,
            "model_access_denied",
        ),
        (ADMIN, Some("admin-key"), admitted, ""),
    ];
    for (model, auth, status, code) in cases {
        let (got, _, json) = call(&app, req(model, auth).to_request()).await;
        assert_eq!(got, status, "{model} {auth:?}: {json}");
        if !code.is_empty() {
            assert_eq!(error_fields(&json).1, code, "{model} {auth:?}");
        }
        if status == StatusCode::FORBIDDEN {
            let msg = json["error"]["message"].as_str().unwrap();
            assert!(msg.contains(ADMIN) && msg.contains("admin_only"), "{msg}");
        }
    }
}

#[test]
fn default_mode_is_api_key_with_keys_and_open_without() {
    let with = config(&opts(vec!["k"]));
    assert_eq!(with.access.default_mode, AccessMode::ApiKey);
    assert_eq!(with.access.mode("anything"), AccessMode::ApiKey);
    let without = config(&opts(vec![]));
    assert_eq!(without.access.default_mode, AccessMode::Open);
}

#[test]
fn model_access_table_parses_and_rejects_unknown_modes() {
    use devshard_gateway::config::{Config, RawConfig, Secret};
    let toml = r#"
        default_access_mode = "admin_only"
        [model_access]
        "m/open" = "open"
        "m/keyed" = "api_key"
    "#;
    let mut raw = RawConfig::from_toml_str(toml, std::path::Path::new("t.toml")).unwrap();
    raw.private_key = Some(Secret::new(crate::support::key().secret_hex()));
    let c = Config::from_raw(raw.clone()).unwrap();
    assert_eq!(c.access.mode("m/open"), AccessMode::Open);
    assert_eq!(c.access.mode("m/keyed"), AccessMode::ApiKey);
    assert_eq!(c.access.mode("other"), AccessMode::AdminOnly);
    raw.model_access.insert("bad".into(), "admin".into());
    let e = Config::from_raw(raw).unwrap_err().to_string();
    assert!(e.contains("model_access"), "{e}");
}

#[actix_web::test]
async fn without_api_keys_models_are_open_by_default() {
    let state = gateway(opts(vec![])).await;
    let _held = state.races.clone().try_acquire_many_owned(1).unwrap();
    let app = atest::init_service(devshard_gateway::app::build_app(state)).await;
    let (got, _, json) = call(&app, req(KEYED, None).to_request()).await;
    assert_eq!(got, StatusCode::SERVICE_UNAVAILABLE, "{json}");
}
