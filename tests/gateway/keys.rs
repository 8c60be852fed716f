//! Per-escrow signing keys through the real gateway over HTTP against the simulated network:
//! the gateway signs as a key that created no escrow; an escrow registered with its creator's
//! key file serves (every host accepts its diffs), and one registered without it is refused at
//! registration with a clear message, before any host hears of it. The escrow's settlement is
//! signed with its key as well.

use devshard_actors::protocol::crypto::SigningKey;
use devshard_gateway::sim::SimConfig;

use crate::live::{self, admin_post, chat, ADMIN};

#[actix_rt::test]
async fn an_escrow_signs_with_its_own_key_and_a_wrong_key_is_refused_at_registration() {
    let mut cfg = SimConfig::with_seed("escrow-keys");
    cfg.hosts = 3;
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    let creator = cfg.gateway_key.clone();
    let other = SigningKey::derive("escrow-keys-gateway", 0);
    let dir = std::env::temp_dir().join(format!("devshard-escrow-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("creator.key");
    std::fs::write(&key_file, creator.secret_hex()).unwrap();
    let other_hex = other.secret_hex();
    let env = [
        ("DEVSHARD_PRIVATE_KEY", other_hex.as_str()),
        ("DEVSHARD_ESCROWS", ""),
    ];
    let l = live::start_with(cfg, &env, |_| {}).await;
    let url = l.url().to_string();

    // Without a key of its own, escrow 43 would be signed with the gateway key: refused.
    let (status, v) = admin_post(&url, "/v1/admin/escrows", r#"{"escrow_id":"43"}"#).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "escrow_creator_mismatch");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(creator.address().as_str())
            && message.contains(other.address().as_str())
            && message.contains("restricted to escrow owner"),
        "{message}"
    );
    // A key file that holds no key: refused, and its text never shown.
    let junk = dir.join("junk.key");
    std::fs::write(&junk, "zz-not-a-key-zz").unwrap();
    let (status, v) = admin_post(
        &url,
        "/v1/admin/escrows",
        &format!(r#"{{"escrow_id":"43","key_file":"{}"}}"#, junk.display()),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "escrow_key_unreadable");
    assert!(!v.to_string().contains("zz-not-a-key-zz"), "{v}");

    // Escrow 42 with its creator's key file: registered, and it serves.
    let (status, v) = admin_post(
        &url,
        "/v1/admin/escrows",
        &format!(
            r#"{{"escrow_id":"42","key_file":"{}"}}"#,
            key_file.display()
        ),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert!(
        !v.to_string().contains(&creator.secret_hex()),
        "key returned: {v}"
    );
    let (status, headers, body) = chat(
        &url,
        r#"{"messages":[{"role":"user","content":"own key"}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers.get("x-devshard-escrow").unwrap(), "42");

    // No host ever heard of escrow 43; the executor applied escrow 42's diff (it checks that
    // the escrow's creator signed it).
    for i in 0..3 {
        let seen = l.sim.host_view(i, "43").map_or(0, |v| v.latest_nonce);
        assert_eq!(seen, 0, "host {i} got a diff of escrow 43");
    }
    let applied = (0..3).filter_map(|i| l.sim.host_view(i, "42"));
    assert!(applied.into_iter().any(|v| v.latest_nonce >= 1));
    let (_, listed) = live::admin_get(&url, "/v1/admin/escrows").await;
    assert!(!listed.to_string().contains(&creator.secret_hex()));

    // The settlement tx is signed with the escrow's key too: the chain accepts only the creator
    // as settler.
    let mut resp = live::client(4)
        .post(format!("{url}/v1/admin/escrows/42/settle"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let _ = resp.body().await;
    let mut state = serde_json::Value::Null;
    for _ in 0..600 {
        let (_, r) = live::admin_get(&url, "/v1/admin/escrows/42/settlement").await;
        state = r["state"].clone();
        if state == "settled" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(state, "settled");
    assert!(matches!(
        l.sim.escrow_status("42"),
        Some(devshard_gateway::sim::EscrowStatus::Settled { .. })
    ));
    l.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
