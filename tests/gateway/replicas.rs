//! Two gateway replicas on one PostgreSQL database (real HTTP, the simulated network): the cost
//! ledger is shared, so replica B answers for a request replica A served, costs included; the
//! one-replica duties stay with their leader, so B refuses to create an escrow (it would pay a
//! deposit the rotation's leader may pay too) and to settle an escrow A owns.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{
    live::{self, admin_get, admin_post, chat},
    pgdb::TestDb,
};

const WHOLE: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"shared ledger"}]}"#;

/// Polls `GET /v1/requests/{rid}` on `url` until its ledger row is settled (bounded).
async fn settled_row(url: &str, rid: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, v) = admin_get(url, &format!("/v1/requests/{rid}")).await;
        if status == 200 && v["ledger"]["settled_ms"].is_i64() {
            return v["ledger"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "not settled in time: {status} {v}"
        );
        // The rows are written and settled by A's background threads: poll them.
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_rt::test]
async fn a_second_replica_reads_the_shared_ledger_and_leaves_duties_to_their_leader() {
    let db = TestDb::new("replicas");
    let url = db.url();
    let a = live::start(
        "replicas",
        3,
        &[
            ("DEVSHARD_DATABASE_URL", url.as_str()),
            ("DEVSHARD_REPLICA_ID", "a"),
        ],
        |c| c.ledger.settle_interval_ms = 50,
    )
    .await;
    let (status, headers, body) = chat(a.url(), WHOLE).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let rid = live::request_id(&headers);
    let on_a = settled_row(a.url(), &rid).await;

    let b = a
        .replica(&[
            ("DEVSHARD_DATABASE_URL", url.as_str()),
            ("DEVSHARD_REPLICA_ID", "b"),
        ])
        .await;
    let on_b = settled_row(&b.url, &rid).await;
    assert_eq!(on_b, on_a, "one ledger: B answers for A's request");
    assert!(on_b["total_cost"].as_u64().unwrap() > 0, "{on_b}");
    assert_eq!(
        db.count("ledger_requests"),
        1,
        "in PostgreSQL, not in a file"
    );

    // A leads the rotation (it checked at start): B neither creates nor settles.
    let (_, view) = admin_get(&b.url, "/v1/admin/rotation").await;
    assert_eq!(view["view"]["leading"], false, "{view}");
    assert_eq!(view["view"]["leader_elsewhere"], "a", "{view}");
    let model = a.sim.config().model.clone();
    let create = serde_json::json!({"model": model, "amount": 1_000_000_000}).to_string();
    let (status, v) = admin_post(&b.url, "/v1/admin/escrows", &create).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "rotation_elsewhere", "{v}");
    let (status, v) = admin_post(&b.url, "/v1/admin/escrows/42/settle", "").await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "escrow_elsewhere", "{v}");
    assert_eq!(
        db.count("records WHERE namespace = 'escrow_create_intent'"),
        0
    );
    assert_eq!(db.count("records WHERE namespace = 'settlement'"), 0);

    b.stop(false).await.unwrap();
    a.stop().await;
}
