//! The chain client against a fake chain REST server, admin registration through it, and the
//! in-process gateway (`start`/`stop`) with configured escrows and a restart from the store.

use std::time::Duration;

use actix_web::{http::StatusCode, test};
use devshard_gateway::{
    app,
    chain::{build, types::ChainEscrow, ChainClient, ChainError},
    config::{ChainSettings, RawConfig, Secret},
    logging,
};
use serde_json::json;

use crate::support::{
    call, chain_routes, fake_chain, gateway, host_key, key, Opts, DEAD_HOST, MODEL,
};

fn settings(url: &str, default_model: Option<&str>) -> ChainSettings {
    ChainSettings {
        rest_url: url.to_string(),
        public_api_url: None,
        timeout: Duration::from_secs(2),
        route_prefix: "/v1/devshard".into(),
        protocol: None,
        default_model: default_model.map(str::to_string),
        max_nonce: 20_000,
    }
}

#[actix_web::test]
async fn lookup_builds_the_escrow_from_string_encoded_fields() {
    let me = key().address().to_string();
    let url = fake_chain(chain_routes("42", &me, "http://host.example:8000"));
    let client = ChainClient::new(settings(&url, Some(MODEL)), logging::discard());
    let info = client
        .lookup_escrow("42", key().address(), None)
        .await
        .unwrap();
    assert_eq!(info.escrow_id, "42");
    assert_eq!(info.model, MODEL);
    assert_eq!(info.amount, 100_000_000);
    assert_eq!(info.config.token_price, 2);
    assert_eq!(info.config.fee_per_nonce, 500);
    assert_eq!(
        info.config.create_devshard_fee, 10_000,
        "0 keeps the default"
    );
    assert_eq!(info.config.refusal_timeout, 90);
    assert_eq!(info.config.execution_timeout, 1200);
    assert_eq!(info.config.validation_rate, 2500);
    assert_eq!(info.config.vote_threshold, 1);
    assert_eq!(info.max_nonce, 20_000);
    assert_eq!(info.group.len(), 3);
    assert_eq!(info.hosts.len(), 3);
    assert_eq!(info.hosts[0].base_url, "http://host.example:8000");
    assert_eq!(info.hosts[2].weight, 12);
    assert_eq!(&info.hosts[1].address, host_key(1).address());
    let with_model = client
        .lookup_escrow("42", key().address(), Some("m2"))
        .await
        .unwrap();
    assert_eq!(with_model.model, "m2");
}

#[actix_web::test]
async fn lookup_errors_are_typed() {
    let other = host_key(9).address().to_string();
    let url = fake_chain(chain_routes("42", &other, DEAD_HOST));
    let client = ChainClient::new(settings(&url, Some(MODEL)), logging::discard());
    let err = client
        .lookup_escrow("42", key().address(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ChainError::CreatorMismatch { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("escrow 42 was created by {other}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("this gateway signs as {}", key().address())),
        "{text}"
    );
    assert!(text.contains("403 restricted to escrow owner"), "{text}");

    let err = client
        .lookup_escrow("41", key().address(), None)
        .await
        .unwrap_err();
    assert_eq!(err, ChainError::EscrowNotFound("41".into()));
    let err = client
        .lookup_escrow("x1", key().address(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ChainError::InvalidEscrowId(_)));

    let me = key().address().to_string();
    let url = fake_chain(chain_routes("42", &me, DEAD_HOST));
    let client = ChainClient::new(settings(&url, None), logging::discard());
    let err = client
        .lookup_escrow("42", key().address(), None)
        .await
        .unwrap_err();
    assert_eq!(err, ChainError::UnknownModel("42".into()));
}

#[actix_web::test]
async fn vote_threshold_factor_and_exact_config() {
    let e: ChainEscrow = serde_json::from_value(json!({"creator": "x", "slots": ["a", "b"],
        "amount": null, "fee_per_nonce": 7}))
    .unwrap();
    assert_eq!(e.amount, 0);
    assert_eq!(e.fee_per_nonce, 7);
    let p = serde_json::from_value(json!({"vote_threshold_factor": "60"})).unwrap();
    let c = build::session_config(&e, Some(&p), 10);
    assert_eq!(c.vote_threshold, 6);
    assert_eq!(c.fee_per_nonce, 7);
    let exact = devshard_actors::protocol::state::SessionConfig::default_for_group(4);
    let e: ChainEscrow =
        serde_json::from_value(json!({"creator": "x", "session_config": exact})).unwrap();
    assert_eq!(build::session_config(&e, Some(&p), 10), exact);
    assert!(serde_json::from_value::<ChainEscrow>(json!({"amount": "-1"})).is_err());
}

#[actix_web::test]
async fn admin_registers_an_escrow_from_the_chain() {
    let me = key().address().to_string();
    let url = fake_chain(chain_routes("42", &me, DEAD_HOST));
    let state = gateway(Opts {
        admin: Some("k"),
        chain_rest_url: Some(url),
        default_model: Some(MODEL),
        ..Opts::default()
    })
    .await;
    let app = test::init_service(app::build_app(state)).await;
    let req = test::TestRequest::post()
        .uri("/v1/admin/escrows")
        .insert_header(("authorization", "Bearer k"))
        .set_payload(r#"{"escrow_id":"42"}"#);
    let (status, _, body) = call(&app, req.to_request()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["escrow_id"], "42");
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["actor"]["alive"], true);
    let (_, _, body) = call(
        &app,
        test::TestRequest::get().uri("/v1/models").to_request(),
    )
    .await;
    assert_eq!(body["data"][0]["id"], MODEL);
    let (status, _, _) = call(&app, test::TestRequest::get().uri("/readyz").to_request()).await;
    assert_eq!(status, StatusCode::OK);
}

#[actix_web::test]
async fn in_process_gateway_registers_configured_escrows_and_restarts_from_the_store() {
    let me = key().address().to_string();
    let chain = fake_chain(chain_routes("42", &me, DEAD_HOST));
    let dir = std::env::temp_dir().join(format!("edge-start-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let raw = |escrows: Vec<String>| RawConfig {
        listen: "127.0.0.1:0".into(),
        workers: 1,
        data_dir: dir.clone(),
        private_key: Some(Secret::new(key().secret_hex())),
        chain_rest_url: chain.clone(),
        default_model: MODEL.into(),
        shutdown_grace_secs: 1,
        escrows,
        ..RawConfig::default()
    };
    // Escrow 7 does not exist: logged, the others are still served.
    let cfg =
        devshard_gateway::config::Config::from_raw(raw(vec!["7".into(), "42".into()])).unwrap();
    let gw = app::start(cfg, logging::discard()).await.unwrap();
    let client = awc::Client::default();
    let res = client
        .get(format!("{}/readyz", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut res = client
        .get(format!("{}/v1/models", gw.url))
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["data"][0]["id"], MODEL);
    gw.stop(true).await.unwrap();

    // Restart without configured escrows: 42 comes back from gateway.db.
    let cfg = devshard_gateway::config::Config::from_raw(raw(Vec::new())).unwrap();
    let gw = app::start(cfg, logging::discard()).await.unwrap();
    let url = gw.url.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = actix_web::rt::spawn(gw.serve_until(async {
        let _ = stopped.await;
    }));
    let res = client.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
    let after = client.get(format!("{url}/healthz")).send().await;
    assert!(after.is_err(), "stopped listening");
    std::fs::remove_dir_all(&dir).unwrap();
}
