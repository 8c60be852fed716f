//! TLS to the chain REST API: a real TLS endpoint (certificate made by the test) in front of the
//! simulated chain. Trusted through `ca_file`, an escrow is registered over it and serves; an
//! untrusted certificate is a clear error naming `ca_file`; an unusable `ca_file` stops the
//! gateway at start with a message naming the setting.

use std::{collections::BTreeMap, time::Duration};

use devshard_gateway::{
    app::{self, AppError},
    chain::{ChainClient, ChainError},
    config::{ChainSettings, Config, ConfigError},
    logging,
};

use crate::{
    live::{self, ADMIN},
    tls_proxy::{authority, https_proxy, https_proxy_to, Backend, TestCa},
};

#[actix_rt::test]
async fn an_escrow_registers_and_serves_through_an_https_chain_api() {
    let ca = TestCa::new("chain-trusted");
    let backend = Backend::default();
    let chain_url = https_proxy_to(&ca, backend.clone()).await;
    let (ca_file, rest) = (ca.pem_file.clone(), chain_url.clone());
    let l = live::start("tls-chain", 3, &[], move |c| {
        c.escrows.clear();
        c.chain.rest_url = rest;
        c.ca_file = Some(ca_file);
    })
    .await;
    backend.set(&authority(l.sim.chain_url()));
    let mut resp = live::client(2)
        .post(format!("{}/v1/admin/escrows", l.url()))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .insert_header(("Content-Type", "application/json"))
        .send_body(r#"{"escrow_id":"42"}"#)
        .await
        .unwrap();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    assert_eq!(resp.status().as_u16(), 201, "{body}");
    let (status, _, bytes) = live::chat(
        l.url(),
        r#"{"max_tokens":8,"messages":[{"role":"user","content":"chain over tls"}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    assert!(l
        .sim
        .chain_requests()
        .by_path
        .keys()
        .any(|p| p.ends_with("devshard_escrow/42")));
    l.stop().await;
}

#[actix_rt::test]
async fn an_untrusted_chain_certificate_is_a_clear_configuration_error() {
    let ca = TestCa::new("chain-untrusted"); // never installed
    let url = https_proxy(&ca, "127.0.0.1:9").await;
    let settings = ChainSettings {
        rest_url: url,
        public_api_url: None,
        timeout: Duration::from_secs(5),
        route_prefix: "/v1/devshard".into(),
        protocol: None,
        default_model: None,
        max_nonce: 20_000,
    };
    let key = devshard_actors::protocol::crypto::SigningKey::derive("tls", 1);
    let err = ChainClient::new(settings, logging::discard())
        .lookup_escrow("42", key.address(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ChainError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("not trusted") && text.contains("ca_file"),
        "{text}"
    );
}

#[actix_rt::test]
async fn an_unusable_ca_file_stops_the_gateway_naming_the_setting() {
    let dir = std::env::temp_dir().join(format!("devshard-tls-bad-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("not-a-cert.pem");
    std::fs::write(&bad, "hello").unwrap();
    for file in [bad.clone(), dir.join("missing.pem")] {
        let env: BTreeMap<String, String> = [
            ("DEVSHARD_PRIVATE_KEY", "01".repeat(32)),
            ("DEVSHARD_LISTEN", "127.0.0.1:0".into()),
            ("DEVSHARD_DATA_DIR", dir.display().to_string()),
            ("DEVSHARD_CA_FILE", file.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let config = Config::load(None, &env).unwrap();
        let Err(err) = app::start(config, logging::discard()).await else {
            panic!("started with an unusable ca_file");
        };
        assert!(
            matches!(
                &err,
                AppError::Config(ConfigError::Invalid { key: "ca_file", .. })
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&file.display().to_string()),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
