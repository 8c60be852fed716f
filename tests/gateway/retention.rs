//! The rotation's retention of settled escrows (`rotation.settled_retention_s`) over the real
//! gateway against the simulated network: an escrow the rotation retired settles, stays
//! registered and listed while its retention runs, and is removed once it is over — as
//! `DELETE /v1/admin/escrows/{id}` would (archive row `by: retention`), its spend still in the
//! cost ledger.
//!
//! Time is driven by the rotation's checks (one every 100 ms, and one at once when the settings
//! change): the retention is an hour while the test watches the escrow stay, then the admin
//! shortens it to one second, already over, and the check that change runs removes the escrow.

use std::time::Duration;

use devshard_actors::store::Store;
use devshard_gateway::escrow_archive::NS_DELETED;
use serde_json::{json, Value};

use crate::{
    escrow_delete::ledger,
    live::{self, admin_get},
    rotation::{load, metric, put_settings, rotation, sim_config, view},
};

/// The escrow's entry in the rotation view's first model.
fn role_of<'a>(v: &'a Value, id: &str) -> Option<&'a Value> {
    v["models"][0]["escrows"]
        .as_array()?
        .iter()
        .find(|e| e["escrow_id"] == id)
}

/// Polls the rotation view (bounded) until `check` holds of it.
async fn view_until(url: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut v = Value::Null;
    for _ in 0..600 {
        v = view(url).await;
        if check(&v) {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the rotation view never showed {what}: {v}");
}

async fn listed(url: &str) -> Vec<String> {
    let (status, v) = admin_get(url, "/v1/admin/escrows").await;
    assert_eq!(status, 200, "{v}");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["escrow_id"].as_str().map(str::to_owned))
        .collect()
}

/// The cost ledger's rows of `escrow`.
async fn ledger_rows(url: &str, escrow: &str) -> usize {
    (ledger(url).await.iter())
        .filter(|r| r["escrow_id"] == escrow)
        .count()
}

#[actix_rt::test]
async fn a_rotated_out_escrow_stays_listed_during_its_retention_and_is_removed_after() {
    let cfg = sim_config("rotation-retention", 160);
    let model = cfg.model.clone();
    let mut r = rotation(&model, 1_000_000_000, 6_000_000_000, 100);
    r.settled_retention_s = 3_600;
    let l = live::start_with(cfg, &[], |c| c.rotation = r.clone()).await;
    let url = l.url().to_string();

    // Escrow 42 runs low, its replacement is created, 42 retires and settles.
    let (sent, failed) = load(&url, 1_000, || !l.sim.created_escrows().is_empty()).await;
    assert_eq!(failed, 0, "no request fails");
    let v = view_until(&url, "42 settled", |v| {
        role_of(v, "42").is_some_and(|e| e["role"] == "settled" && e["removal_at_ms"].is_i64())
    })
    .await;
    let (_, settlement) = admin_get(&url, "/v1/admin/escrows/42/settlement").await;
    assert_eq!(settlement["state"], "settled", "{settlement}");
    let settled_ms = settlement["updated_ms"].as_i64().unwrap();
    assert_eq!(
        role_of(&v, "42").unwrap()["removal_at_ms"].as_i64(),
        Some(settled_ms + 3_600_000),
        "{v}"
    );
    assert_eq!(v["settled_retention_s"], 3_600, "{v}");
    let spent = ledger_rows(&url, "42").await;
    assert!(
        spent > 0 && spent <= sent,
        "42's spend is in the ledger: {spent}"
    );

    // During the retention: several checks later 42 is still registered, listed and on view.
    let checks = v["checks"].as_u64().unwrap();
    let v = view_until(&url, "3 more checks", |v| {
        v["checks"].as_u64() >= Some(checks + 3)
    })
    .await;
    assert!(role_of(&v, "42").is_some(), "{v}");
    assert_eq!(v["models"][0]["removed_settled"], 0, "{v}");
    assert!(listed(&url).await.contains(&"42".to_owned()));
    assert!(l.gw.store.get(NS_DELETED, "42").unwrap().is_none());

    // Shortened to one second, already over (a check ran a second after the settlement): the
    // check the change runs at once removes 42.
    view_until(&url, "a check a second after the settlement", |v| {
        v["last_check_ms"].as_i64() >= Some(settled_ms + 1_000)
    })
    .await;
    r.settled_retention_s = 1;
    let (status, body) = put_settings(&url, &json!({ "rotation": r })).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rotation"]["settled_retention_s"], 1, "{body}");
    let v = view_until(&url, "42 removed", |v| {
        v["models"][0]["removed_settled"] == 1
    })
    .await;
    assert!(role_of(&v, "42").is_none(), "{v}");
    assert!(!listed(&url).await.contains(&"42".to_owned()));
    let (status, _) = admin_get(&url, "/v1/admin/escrows/42").await;
    assert_eq!(status, 404, "unregistered");
    // The replacement still serves.
    let (_, failed) = load(&url, 8, || false).await;
    assert_eq!(failed, 0);

    // What is kept: the archive row (by the retention), the settlement record, the ledger.
    let archived = l.gw.store.get(NS_DELETED, "42").unwrap().unwrap();
    assert_eq!(
        (&archived["by"], &archived["reason"]),
        (&json!("retention"), &json!("settled")),
        "{archived}"
    );
    assert_eq!(archived["registration"]["escrow_id"], "42");
    assert_eq!(ledger_rows(&url, "42").await, spent);
    assert_eq!(
        metric(
            &url,
            "devshard_escrow_deletions_total{result=\"retention_settled\"}"
        )
        .await,
        Some(1.0)
    );
    l.stop().await;
}
