//! Escrow lifecycle admin across restarts of the real gateway (SQLite store, same data
//! directory, same simulated network): a deactivation survives a restart, and so does the
//! reactivation.

use crate::live::{self, admin_get, chat, ADMIN};

const CHAT: &str = r#"{"messages":[{"role":"user","content":"still off?"}]}"#;

async fn admin_post(url: &str, path: &str) -> (u16, serde_json::Value) {
    let mut resp = live::client(4)
        .post(format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

#[actix_rt::test]
async fn a_deactivation_and_a_reactivation_survive_a_restart() {
    let l = live::start("lifecycle-restart", 3, &[], |_| {}).await;
    let (status, v) = admin_post(l.url(), "/v1/admin/escrows/42/deactivate").await;
    assert_eq!((status, v["active"].clone()), (200, false.into()), "{v}");

    let l = l.restart(&[]).await;
    let (status, _, body) = chat(l.url(), CHAT).await;
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    let err: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(err["error"]["code"], "no_active_escrow");
    let (_, state) = admin_get(l.url(), "/v1/admin/state").await;
    assert_eq!(state["deactivated_escrows"], serde_json::json!(["42"]));

    let (status, v) = admin_post(l.url(), "/v1/admin/escrows/42/activate").await;
    assert_eq!((status, v["active"].clone()), (200, true.into()), "{v}");
    let l = l.restart(&[]).await;
    let (status, headers, body) = chat(l.url(), CHAT).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers.get("x-devshard-escrow").unwrap(), "42");
    l.stop().await;
}
