//! Protocol versions per escrow (docs/versions.md): `demo --protocol v4.1` serves streaming and
//! non-streaming answers with its hosts on route `/devshard/v4.1` agreeing with the gateway's
//! root (tag `"v4.1"`), and an escrow on a version we do not implement is refused at once.

use std::collections::BTreeMap;

use devshard_actors::{clock::TokioClock, protocol::version::ProtocolVersion};
use devshard_gateway::{
    app::{self, StartOptions},
    config::Config,
    demo::{self, DemoArgs},
    logging,
    sim::{Profile, SimNetwork},
};

use crate::live::{self, admin_get, admin_post, chat, ADMIN};

fn args(protocol: ProtocolVersion) -> DemoArgs {
    DemoArgs {
        config: None,
        hosts: 3,
        profile: Profile::Zero,
        seed: "versions".into(),
        escrows: vec!["42".into()],
        output_tokens: 8,
        protocol,
        warm_keys: None,
        rotation: false,
        max_nonce: devshard_gateway::demo::ROTATION_MAX_NONCE,
    }
}

#[actix_rt::test]
async fn demo_on_v4_1_serves_both_shapes_and_its_hosts_agree_with_the_gateways_root() {
    let args = args(ProtocolVersion::V4_1);
    let clock = TokioClock::new().shared();
    let sim = SimNetwork::start(demo::sim_config(&args), clock.clone())
        .await
        .unwrap();
    assert_eq!(sim.config().route_prefix, "/devshard/v4.1");
    let dir = std::env::temp_dir().join(format!("devshard-versions-{}", std::process::id()));
    let mut env: BTreeMap<String, String> = [
        ("DEVSHARD_LISTEN", "127.0.0.1:0".to_string()),
        ("DEVSHARD_DATA_DIR", dir.display().to_string()),
        ("DEVSHARD_ADMIN_API_KEY", ADMIN.to_string()),
        ("DEVSHARD_WORKERS", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    demo::fill_environment(&args, &sim, &mut env);
    let config = Config::load(None, &env).unwrap();
    let opts = StartOptions {
        registry: None,
        clock: Some(clock),
    };
    let gw = app::start_with(config, logging::discard(), opts)
        .await
        .unwrap();
    let url = gw.url.clone();
    let (_, escrow) = admin_get(&url, "/v1/admin/escrows/42").await;
    assert_eq!(escrow["route_prefix"], "/devshard/v4.1", "{escrow}");
    assert_eq!(escrow["protocol"], "v4.1", "{escrow}");
    for stream in [true, false, true] {
        let body = format!(
            r#"{{"stream":{stream},"max_tokens":8,"messages":[{{"role":"user","content":"v4.1 {stream}"}}]}}"#
        );
        let (status, _, bytes) = chat(&url, &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("content"), "{text}");
    }
    let (status, _) = admin_post(&url, "/v1/admin/escrows/42/sync", "").await;
    assert_eq!(status, 200);
    let (_, escrow) = admin_get(&url, "/v1/admin/escrows/42").await;
    let root = escrow["snapshot"]["state_root"]
        .as_str()
        .unwrap()
        .to_string();
    let nonce = escrow["snapshot"]["nonce"].as_u64().unwrap();
    assert!(nonce >= 3);
    for i in 0..3 {
        let view = sim.host_view(i, "42").unwrap();
        assert_eq!(view.state.config().protocol, ProtocolVersion::V4_1);
        assert_eq!(view.latest_nonce, nonce, "host {i} caught up");
        assert_eq!(hex::encode(view.state_root), root, "host {i} agrees");
    }
    // The tag is really in the root: the same state on v2 hashes differently.
    let mut snap = sim.host_view(0, "42").unwrap().state.snapshot();
    snap.config.protocol = ProtocolVersion::V2;
    let v2 = devshard_actors::protocol::state::StateMachine::from_snapshot(snap).unwrap();
    assert_ne!(hex::encode(v2.state_root()), root);
    gw.stop(false).await.unwrap();
    sim.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[actix_rt::test]
async fn registering_an_escrow_on_v5_fails_at_once_naming_the_supported_versions() {
    let l = live::start("versions-v5", 3, &[], |_| {}).await;
    let lookups_of_43 = |l: &live::Live| -> u64 {
        let r = l.sim.chain_requests();
        r.by_path
            .iter()
            .filter(|(p, _)| p.ends_with("/43"))
            .map(|(_, n)| n)
            .sum()
    };
    for bad in ["v5", "v6", "ristretto"] {
        let (status, body) = admin_post(
            l.url(),
            "/v1/admin/escrows",
            &format!(r#"{{"escrow_id":"43","protocol":"{bad}"}}"#),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("\"{bad}\"")), "{message}");
        assert!(message.contains("supported: v2, v4.1"), "{message}");
        assert_eq!(body["error"]["param"], "protocol", "{body}");
    }
    assert_eq!(
        lookups_of_43(&l),
        0,
        "refused before any chain call: {:?}",
        l.sim.chain_requests().by_path
    );
    let (status, body) = admin_post(
        l.url(),
        "/v1/admin/escrows",
        r#"{"escrow_id":"42","protocol":"v2"}"#,
    )
    .await;
    assert!(status == 200 || status == 201, "{body}");
    l.stop().await;
}

#[test]
fn a_configured_unsupported_version_stops_the_gateway_with_its_name() {
    let base = |k: &str, v: &str| -> BTreeMap<String, String> {
        [
            ("DEVSHARD_PRIVATE_KEY", "01".repeat(32)),
            (k, v.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    };
    for (key, value, setting) in [
        ("DEVSHARD_PROTOCOL", "v5", "protocol"),
        ("DEVSHARD_ROUTE_PREFIX", "/devshard/v6", "route_prefix"),
    ] {
        let e = Config::load(None, &base(key, value))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(setting) && e.contains("supported: v2, v4.1"),
            "{e}"
        );
    }
    let ok = Config::load(None, &base("DEVSHARD_ROUTE_PREFIX", "/devshard/v4.1")).unwrap();
    assert_eq!(ok.chain.protocol, Some(ProtocolVersion::V4_1));
    assert_eq!(
        ok.chain.route_for(ok.chain.protocol_for(None)),
        "/devshard/v4.1"
    );
    let v2 = Config::load(None, &base("DEVSHARD_PROTOCOL", "v2")).unwrap();
    assert_eq!(v2.chain.route_for(ProtocolVersion::V4_1), "/devshard/v4.1");
    assert_eq!(v2.chain.route_for(ProtocolVersion::V2), "/v1/devshard");
}
