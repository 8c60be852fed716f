//! Tests of the store's contract, each on both backends (`…::sqlite` on a real file, `…::postgres`
//! on a fresh schema of the test server, see `store/pgdb.rs`), and the SQLite store's group
//! commit and crash safety.

// The test helpers in the modules below are not `#[test]` fns, so clippy's in-test allowances
// do not reach them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "store/budgets.rs"]
mod budgets;
#[path = "store/crash.rs"]
mod crash;
#[path = "store/db.rs"]
mod db;
#[path = "store/duty.rs"]
mod duty;
#[path = "store/group.rs"]
mod group;
#[path = "store/lease.rs"]
mod lease;
#[path = "store/ledger.rs"]
mod ledger;
#[path = "store/migrate.rs"]
mod migrate;
#[path = "store/outage.rs"]
mod outage;
#[path = "store/pgdb.rs"]
mod pgdb;
#[path = "store/readiness.rs"]
mod readiness;
#[path = "store/support.rs"]
mod support;
#[path = "store/tls.rs"]
mod tls;

use devshard_actors::{
    protocol::{
        crypto::{Address, SigningKey},
        warm::WarmBinding,
    },
    store::{ns, Store, StoreError},
};
use serde_json::json;

use db::Db;
use support::{diff, signed_diff};

/// `name::sqlite` and `name::postgres`: the contract test `name` on each backend.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::Db::sqlite(stringify!($name))).await;
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(super::Db::postgres(stringify!($name))).await;
            }
        }
    )*};
}

on_both_backends!(
    diffs_round_trip_byte_for_byte,
    warm_key_deltas_are_stored_with_their_diffs_and_survive_reopen,
    out_of_order_and_unstorable_appends_are_rejected,
    delete_diffs_empties_the_log_and_restarts_nonces,
    records_put_get_list_delete,
    acked_writes_survive_reopen,
    flush_and_close,
);

mod ledger_rows_settle_once_and_any_instance_reads_them {
    #[tokio::test]
    async fn sqlite() {
        super::ledger::rows_settle_once_and_any_instance_reads_them(super::Db::sqlite("ledger"))
            .await;
    }
    #[tokio::test]
    async fn postgres() {
        super::ledger::rows_settle_once_and_any_instance_reads_them(super::Db::postgres("ledger"))
            .await;
    }
}

#[tokio::test]
async fn postgres_escrow_budgets_are_fenced_by_the_lease() {
    budgets::budgets_are_published_under_the_lease_and_read_with_age_and_durable_nonce().await;
}

#[tokio::test]
async fn postgres_one_replica_duties_are_fenced() {
    duty::only_the_leader_runs_a_duty_and_a_takeover_fences_the_old_one().await;
}

async fn diffs_round_trip_byte_for_byte(db: Db) {
    let store = db.open_for(&["42", "43", "44"]);
    let key = SigningKey::derive("store-test", 0);
    let log_a: Vec<_> = (1..=20).map(|n| signed_diff("42", n, &key)).collect();
    let log_b: Vec<_> = [1, 2, 5, 9]
        .iter()
        .map(|&n| signed_diff("43", n, &key))
        .collect();
    for d in &log_a {
        store.append_diff("42", d).await.unwrap();
    }
    for d in &log_b {
        store.append_diff("43", d).await.unwrap();
    }
    // An empty diff (no txs, no root) survives as well.
    let empty = devshard_actors::protocol::diff::Diff {
        nonce: 1,
        txs: vec![],
        user_sig: vec![],
        post_state_root: vec![],
    };
    store.append_diff("44", &empty).await.unwrap();

    let loaded = store.load_diffs("42").unwrap();
    assert_eq!(loaded, log_a);
    for (got, want) in loaded.iter().zip(&log_a) {
        assert_eq!(got.wire_txs(), want.wire_txs());
        assert_eq!(got.signed_content("42"), want.signed_content("42"));
        assert_eq!(got.user_sig, want.user_sig);
        assert_eq!(got.post_state_root, want.post_state_root);
        got.verify_user_sig("42", key.address()).unwrap();
    }
    assert_eq!(store.load_diffs("43").unwrap(), log_b);
    assert_eq!(store.load_diffs("44").unwrap(), [empty]);
    assert_eq!(store.load_diffs_from("42", 15).unwrap(), log_a[14..]);
    assert_eq!(store.load_diffs_from("42", 0).unwrap(), log_a);
    assert_eq!(store.load_diffs_from("43", 3).unwrap(), log_b[2..]);
    assert_eq!(store.load_diffs_from("43", 9).unwrap(), log_b[3..]);
    assert!(store.load_diffs_from("43", 10).unwrap().is_empty());
    assert!(store.load_diffs_from("43", u64::MAX).unwrap().is_empty());
    assert!(store.load_diffs("unknown").unwrap().is_empty());
}

async fn warm_key_deltas_are_stored_with_their_diffs_and_survive_reopen(db: Db) {
    let key = SigningKey::derive("store-test", 0);
    let bound = |slot: u32, a: &str| WarmBinding {
        slot,
        address: Address::unchecked(a),
    };
    {
        let store = db.open_for(&["42", "43"]);
        store
            .append_diff("42", &signed_diff("42", 1, &key))
            .await
            .unwrap();
        let two = [bound(1, "gonka1w1"), bound(4, "gonka1w4")];
        store
            .append_diff_with_warm("42", &signed_diff("42", 2, &key), &two)
            .await
            .unwrap();
        store
            .append_diff_with_warm("43", &signed_diff("43", 1, &key), &[bound(0, "gonka1x")])
            .await
            .unwrap();
        store.close().unwrap();
    }
    let store = db.open_for(&["42", "43"]);
    let deltas = store.load_warm_deltas("42").unwrap();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[&2], [bound(1, "gonka1w1"), bound(4, "gonka1w4")]);
    assert_eq!(store.load_diffs("42").unwrap().len(), 2);
    assert_eq!(
        store.load_warm_deltas("43").unwrap()[&1],
        [bound(0, "gonka1x")]
    );
    store.delete_diffs("43").await.unwrap();
    assert!(store.load_warm_deltas("43").unwrap().is_empty());
}

async fn out_of_order_and_unstorable_appends_are_rejected(db: Db) {
    let store = db.open_for(&["e"]);
    store.append_diff("e", &diff(5)).await.unwrap();
    let err = store.append_diff("e", &diff(5)).await.unwrap_err();
    assert_eq!(
        err,
        StoreError::OutOfOrder {
            escrow: "e".into(),
            last: 5,
            got: 5
        }
    );
    assert!(store.append_diff("e", &diff(0)).await.is_err());
    assert!(matches!(
        store.append_diff("e", &diff(u64::MAX)).await,
        Err(StoreError::Io(_))
    ));
    store.append_diff("e", &diff(6)).await.unwrap();
    assert_eq!(store.load_diffs("e").unwrap(), [diff(5), diff(6)]);
}

async fn delete_diffs_empties_the_log_and_restarts_nonces(db: Db) {
    let store = db.open_for(&["e", "keep"]);
    for n in 1..=3 {
        store.append_diff("e", &diff(n)).await.unwrap();
    }
    store.append_diff("keep", &diff(1)).await.unwrap();
    store.delete_diffs("e").await.unwrap();
    assert!(store.load_diffs("e").unwrap().is_empty());
    assert_eq!(store.load_diffs("keep").unwrap(), [diff(1)]);
    store.append_diff("e", &diff(1)).await.unwrap();
    assert_eq!(store.load_diffs("e").unwrap(), [diff(1)]);
    store.delete_diffs("never-existed").await.unwrap();
}

async fn records_put_get_list_delete(db: Db) {
    let store = db.open_for(&[]);
    assert_eq!(store.get(ns::ESCROWS, "1").unwrap(), None);
    store
        .put(ns::ESCROWS, "2", json!({"creator": "gonka1b", "n": 2}))
        .await
        .unwrap();
    store
        .put(ns::ESCROWS, "1", json!({"creator": "gonka1a", "n": 1}))
        .await
        .unwrap();
    store
        .put(ns::ESCROWS, "10", json!(["x", null, 1.5, {"deep": [true]}]))
        .await
        .unwrap();
    store
        .put(ns::SESSIONS, "1", json!({"host_nonce": 7}))
        .await
        .unwrap();
    store
        .put(ns::SETTINGS, "settings", json!("ünïcode ✓"))
        .await
        .unwrap();

    assert_eq!(
        store.get(ns::ESCROWS, "1").unwrap(),
        Some(json!({"creator": "gonka1a", "n": 1}))
    );
    assert_eq!(
        store.get(ns::SESSIONS, "1").unwrap(),
        Some(json!({"host_nonce": 7}))
    );
    assert_eq!(
        store.get(ns::SETTINGS, "settings").unwrap(),
        Some(json!("ünïcode ✓"))
    );
    let keys: Vec<String> = store
        .list(ns::ESCROWS)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["1", "10", "2"], "ordered by key");

    // Overwrite.
    store
        .put(ns::ESCROWS, "1", json!({"creator": "gonka1a", "n": 100}))
        .await
        .unwrap();
    assert_eq!(
        store.get(ns::ESCROWS, "1").unwrap(),
        Some(json!({"creator": "gonka1a", "n": 100}))
    );
    assert_eq!(store.list(ns::ESCROWS).unwrap().len(), 3);

    // Delete only touches its namespace; deleting a missing record is a no-op.
    store.delete(ns::ESCROWS, "1").await.unwrap();
    store.delete(ns::ESCROWS, "1").await.unwrap();
    assert_eq!(store.get(ns::ESCROWS, "1").unwrap(), None);
    assert_eq!(
        store.get(ns::SESSIONS, "1").unwrap(),
        Some(json!({"host_nonce": 7}))
    );
    assert_eq!(
        store.list(ns::ESCROWS).unwrap(),
        [
            ("10".to_string(), json!(["x", null, 1.5, {"deep": [true]}])),
            ("2".into(), json!({"creator": "gonka1b", "n": 2}))
        ]
    );
    assert!(store.list(ns::PARTICIPANTS).unwrap().is_empty());
}

async fn acked_writes_survive_reopen(db: Db) {
    {
        let store = db.open_for(&["42"]);
        for n in 1..=50 {
            store.append_diff("42", &diff(n)).await.unwrap();
        }
        store
            .put(ns::ESCROWS, "42", json!({"open": true}))
            .await
            .unwrap();
        store.put(ns::ESCROWS, "gone", json!(1)).await.unwrap();
        store.delete(ns::ESCROWS, "gone").await.unwrap();
        // Dropped without flush or close: acked writes are already durable.
    }
    let store = db.open_for(&["42"]);
    assert_eq!(
        store.load_diffs("42").unwrap(),
        (1..=50).map(diff).collect::<Vec<_>>()
    );
    assert_eq!(
        store.list(ns::ESCROWS).unwrap(),
        [("42".to_string(), json!({"open": true}))]
    );
    // The last nonce is picked up from the file.
    assert!(matches!(
        store.append_diff("42", &diff(50)).await,
        Err(StoreError::OutOfOrder {
            last: 50,
            got: 50,
            ..
        })
    ));
    store.append_diff("42", &diff(51)).await.unwrap();
    if let Db::Sqlite(dir) = &db {
        assert!(
            dir.path().join("data").is_dir(),
            "parent directories are created"
        );
    }
}

async fn flush_and_close(db: Db) {
    let store = db.open_for(&["e"]);
    let pending: Vec<_> = (1..=100)
        .map(|n| store.append_diff("e", &diff(n)))
        .collect();
    store.flush().await.unwrap();
    // Everything issued before the flush has committed by the time it resolves.
    assert_eq!(store.load_diffs("e").unwrap().len(), 100);
    for ack in pending {
        ack.await.unwrap();
    }
    let last = store.put("ns", "k", json!(1));
    store.close().unwrap();
    last.await.unwrap();
    store.close().unwrap();
    assert_eq!(
        store.append_diff("e", &diff(101)).await,
        Err(StoreError::Closed)
    );
    assert_eq!(
        store.put("ns", "k", json!(2)).await,
        Err(StoreError::Closed)
    );
    assert_eq!(store.flush().await, Err(StoreError::Closed));
    assert_eq!(
        store.get("ns", "k").unwrap(),
        Some(json!(1)),
        "reads work after close"
    );
}

#[tokio::test]
async fn group_commit_groups_concurrent_appends() {
    group::concurrent_appends_share_commits().await;
}

#[tokio::test]
async fn group_commit_drains_the_queue_in_large_groups() {
    group::queued_ops_commit_in_few_groups().await;
}

#[tokio::test]
async fn out_of_order_append_does_not_poison_its_group() {
    group::out_of_order_append_fails_alone().await;
}

#[tokio::test]
async fn postgres_takeover_fences_the_old_owner() {
    lease::a_takeover_fences_the_old_owner_and_the_new_one_resumes_at_the_next_nonce().await;
}

#[tokio::test]
async fn postgres_leases_renew_and_release() {
    lease::leases_are_renewed_while_held_and_released_on_close().await;
}

#[tokio::test]
async fn migrate_moves_sqlite_to_postgres() {
    migrate::every_table_moves_and_a_non_empty_target_is_refused().await;
}

#[tokio::test]
async fn postgres_restart_fails_typed_then_recovers_without_reopening() {
    outage::operations_fail_typed_while_the_server_is_down_and_recover_without_reopening().await;
}

#[tokio::test]
async fn postgres_tls_modes_against_a_hostssl_only_server() {
    tls::tls_modes_against_a_server_that_takes_tls_connections_only().await;
}

#[tokio::test]
async fn postgres_tls_required_from_a_server_without_it() {
    tls::require_refuses_a_server_without_tls().await;
}

#[tokio::test]
async fn postgres_restart_leaves_no_gap_in_a_log() {
    outage::appends_queued_behind_a_failed_one_never_leave_a_gap().await;
}

#[tokio::test]
async fn postgres_readiness_follows_leases_and_the_database() {
    readiness::readiness_follows_lease_ownership_and_database_reachability().await;
}

#[tokio::test]
async fn postgres_refuses_a_newer_schema() {
    lease::a_newer_schema_is_refused().await;
}

#[test]
fn writes_from_many_threads() {
    futures::executor::block_on(group::writes_from_many_threads_keep_per_escrow_order());
}

#[test]
fn kill_minus_9_keeps_every_acked_diff() {
    crash::kill_minus_9_keeps_every_acked_diff();
}

/// Not a test: the child process of `kill_minus_9_keeps_every_acked_diff` (re-runs this binary).
#[test]
#[ignore = "helper process of kill_minus_9_keeps_every_acked_diff"]
fn child_writer_entry() {
    if let Some(db) = std::env::var_os(crash::CHILD_DB_ENV) {
        crash::child_main(std::path::Path::new(&db));
    }
}
