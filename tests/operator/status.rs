//! `GET /v1/status`: the Go gateway's gateway-mode shape, public, filled from the live escrow,
//! the participants' health and the race limiter; fields without an honest figure are absent.

use crate::live::{self, chat, client, escrow_nonce, ADMIN};
use serde_json::Value;

async fn status(url: &str) -> Value {
    let mut resp = client(2)
        .get(format!("{url}/v1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "public, no key");
    resp.json().await.unwrap()
}

async fn admin_post(url: &str, path: &str, body: &str) -> u16 {
    client(2)
        .post(format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .insert_header(("Content-Type", "application/json"))
        .send_body(body.to_string())
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[actix_rt::test]
async fn status_has_the_gateway_mode_shape_with_live_figures() {
    let l = live::start("status", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    let (code, _, _) = chat(&url, r#"{"messages":[{"role":"user","content":"x"}]}"#).await;
    assert_eq!(code, 200);
    let s = status(&url).await;
    assert_eq!(s["mode"], "gateway");
    assert_eq!(s["runtimes"], 1);
    let d = &s["devshards"][0];
    assert_eq!(d["id"], "42");
    assert_eq!(d["active"], true);
    assert_eq!(d["nonce"].as_u64(), Some(escrow_nonce(&url).await));
    assert!(d["balance"].as_u64().is_some_and(|b| b > 0), "{d}");
    assert_eq!(d["requests_blocked"], false);
    assert!(d["chain_phase"].is_string(), "{d}");
    assert!(
        d.get("protocol_version").is_none() && d.get("reserved_tokens").is_none(),
        "not faked: {d}"
    );
    assert_eq!(s["limiter"]["max_concurrent_requests"], 512);
    assert_eq!(s["limiter"]["in_flight_requests"], 0);
    assert!(s["limiter"].get("scale_factor").is_none());
    let c = &s["capacity"];
    assert_eq!(c["host_count"], 3);
    assert_eq!(c["available_host_count"], 3);
    assert_eq!(c["available_percent"], 100.0);
    let model = d["model"].as_str().unwrap();
    assert_eq!(c["models"][model]["routable"], true);
    assert_eq!(c["models"][model]["active_devshards"], 1);

    // An ejected host is unavailable; a deactivated escrow is not active.
    let host = l.sim.hosts()[0].address.to_string();
    let body = format!(r#"{{"participant_key":"{host}"}}"#);
    assert_eq!(
        admin_post(&url, "/v1/admin/participants/eject", &body).await,
        200
    );
    assert_eq!(
        admin_post(&url, "/v1/admin/escrows/42/deactivate", "").await,
        200
    );
    let s = status(&url).await;
    assert_eq!(s["capacity"]["available_host_count"], 2, "{s}");
    assert_eq!(s["capacity"]["unavailable_host_count"], 1);
    assert!(s["capacity"]["lost_weight"].as_u64().unwrap() > 0);
    assert_eq!(s["devshards"][0]["active"], false);
    assert!(!s.to_string().contains(&l.sim.gateway_key().secret_hex()));
    let resp = client(2)
        .post(format!("{url}/v1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    l.stop().await;
}
