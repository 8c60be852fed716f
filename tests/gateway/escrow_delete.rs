//! `DELETE /v1/admin/escrows/{id}` over the real gateway: only a settled escrow, or with
//! `?force=true` one that never granted a nonce; the spend of a deleted escrow stays in the
//! cost ledger.

use std::time::Duration;

use devshard_actors::store::Store;
use devshard_gateway::escrow_archive::NS_DELETED;
use serde_json::{json, Value};

use crate::live::{self, admin_get, admin_post, chat, ADMIN};

const CHAT: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"delete me"}]}"#;

async fn admin_delete(url: &str, path: &str) -> (u16, Value) {
    let mut resp = live::client(2)
        .delete(format!("{url}{path}"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

/// The cost ledger's rows (JSON lines export).
pub(super) async fn ledger(url: &str) -> Vec<Value> {
    let mut resp = live::client(2)
        .get(format!("{url}/v1/admin/ledger?format=jsonl"))
        .insert_header(("Authorization", format!("Bearer {ADMIN}")))
        .send()
        .await
        .unwrap();
    let body = resp.body().limit(16 << 20).await.unwrap();
    String::from_utf8_lossy(&body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Polls (bounded) until `check` holds of the admin GET of `path`.
async fn wait_for(url: &str, path: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..600 {
        let (_, v) = admin_get(url, path).await;
        if check(&v) {
            return v;
        }
        last = v;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never got there: {last}");
}

#[actix_rt::test]
async fn a_used_escrow_is_deleted_only_once_settled_and_its_spend_stays_in_the_ledger() {
    // The ledger does not settle costs in this run: after the restart it must settle them from
    // the deleted escrow's kept log and archived registration.
    let l = live::start("delete-settled", 3, &[], |c| {
        c.ledger.settle_interval_ms = 3_600_000;
    })
    .await;
    let url = l.url().to_string();
    for _ in 0..5 {
        let (status, _, body) = chat(&url, CHAT).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42").await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (409, &json!("escrow_not_settled")),
        "{v}"
    );
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("settlement state: active"));
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42?force=true").await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (409, &json!("escrow_in_use")),
        "{v}"
    );

    let (status, v) = admin_post(&url, "/v1/admin/escrows/42/settle", "").await;
    assert_eq!(status, 202, "{v}");
    wait_for(&url, "/v1/admin/escrows/42/settlement", |r| {
        r["state"] == "settled"
    })
    .await;
    let rows = wait_for(&url, "/v1/admin/escrows/42", |_| true).await;
    let nonce = rows["snapshot"]["nonce"].as_u64().unwrap();
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42?purge=true").await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (409, &json!("escrow_kept_for_accounting")),
        "{v}"
    );
    let spend_before: Vec<Value> = ledger(&url).await;
    assert_eq!(spend_before.len(), 5);
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"escrow_id": "42", "deleted": true, "purged": false, "reason": "settled",
            "nonce": nonce})
    );
    let (status, _) = admin_get(&url, "/v1/admin/escrows/42").await;
    assert_eq!(status, 404, "unregistered");
    let archived = l.gw.store.get(NS_DELETED, "42").unwrap().unwrap();
    assert_eq!(
        (&archived["by"], &archived["nonce"]),
        (&json!("admin"), &json!(nonce))
    );
    let (status, _, _) = chat(&url, CHAT).await;
    assert_ne!(status, 200, "no longer served");

    let (_, metrics) = live::metrics(&url).await;
    for result in [
        "refused_not_settled",
        "refused_in_use",
        "refused_purge",
        "deleted_settled",
    ] {
        let line = format!("devshard_escrow_deletions_total{{result=\"{result}\"}} 1");
        assert!(metrics.contains(&line), "{line}");
    }

    // Accounting still reports the deleted escrow's spend (here settled only after a restart,
    // without the escrow's registration), and the escrow stays deleted.
    let l = l.restart(&[("DEVSHARD_ESCROWS", "")]).await;
    let url = l.url().to_string();
    let ids =
        |rows: &[Value]| -> Vec<Value> { rows.iter().map(|r| r["request_id"].clone()).collect() };
    let mut rows = Vec::new();
    for _ in 0..600 {
        rows = ledger(&url).await;
        if rows
            .iter()
            .all(|r| r["total_cost"].as_u64().is_some_and(|c| c > 0))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ids(&rows), ids(&spend_before), "{rows:?}");
    assert!(rows.iter().all(|r| r["escrow_id"] == "42"));
    assert!(
        rows.iter()
            .all(|r| r["total_cost"].as_u64().is_some_and(|c| c > 0)),
        "{rows:?}"
    );
    let (status, _) = admin_get(&url, "/v1/admin/escrows/42").await;
    assert_eq!(status, 404, "still deleted");
    l.stop().await;
}

#[actix_rt::test]
async fn an_escrow_that_never_granted_a_nonce_goes_with_force() {
    let l = live::start("delete-unused", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42").await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (409, &json!("escrow_not_settled")),
        "{v}"
    );
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42?force=true").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((&v["reason"], &v["nonce"]), (&json!("unused"), &json!(0)));
    let (status, v) = admin_delete(&url, "/v1/admin/escrows/42?force=true").await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &json!("escrow_not_found")),
        "{v}"
    );
    let (_, list) = admin_get(&url, "/v1/admin/escrows").await;
    assert_eq!(list["data"], json!([]));
    l.stop().await;
}
