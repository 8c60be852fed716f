//! `devshard-gateway migrate --from sqlite:PATH --to postgres://…` as a real process: every table
//! moves, and a target that is not empty is refused.

use std::process::Command;

use devshard_actors::{
    protocol::{crypto::Address, warm::WarmBinding},
    store::{ns, Store},
};
use devshard_gateway::store::{
    ledger::{AttemptRow, LedgerStore, RequestRow},
    SqliteStore,
};
use serde_json::json;

use crate::{db::pg_store, pgdb::TestDb, support::diff, support::TempDir};

fn request(id: &str) -> RequestRow {
    RequestRow {
        request_id: id.into(),
        started_ms: 1,
        ended_ms: 2,
        model: "m".into(),
        escrow_id: "42".into(),
        api_key_id: "anonymous".into(),
        stream: true,
        outcome: "completed".into(),
        status: 200,
        winner_nonce: Some(1),
        input_tokens: None,
        output_tokens: None,
        reserved_cost: None,
        actual_cost: None,
        total_cost: None,
        settled_ms: None,
        attempts: vec![AttemptRow {
            nonce: 1,
            host: "gonka1h".into(),
            role: "primary".into(),
            result: "won".into(),
            inference: None,
            input_tokens: None,
            output_tokens: None,
            reserved_cost: None,
            actual_cost: None,
            fee: None,
            cost: None,
            settled_ms: None,
        }],
    }
}

fn migrate(dir: &TempDir, db: &TestDb) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_devshard-gateway"))
        .arg("migrate")
        .arg("--from")
        .arg(format!("sqlite:{}", dir.db().display()))
        .arg("--to")
        .arg(db.url())
        .output()
        .unwrap()
}

pub async fn every_table_moves_and_a_non_empty_target_is_refused() {
    let dir = TempDir::new("migrate");
    let warm = vec![WarmBinding {
        slot: 2,
        address: Address::unchecked("gonka1w"),
    }];
    {
        let store = SqliteStore::open(dir.db()).unwrap();
        for n in 1..=5 {
            store.append_diff("42", &diff(n)).await.unwrap();
        }
        store
            .append_diff_with_warm("43", &diff(1), &warm)
            .await
            .unwrap();
        store.put(ns::ESCROWS, "42", json!({"a": 1})).await.unwrap();
        store
            .put(ns::SETTINGS, "settings", json!("✓"))
            .await
            .unwrap();
        let ledger = LedgerStore::open(&dir.db()).unwrap();
        ledger.insert(request("r1"));
        ledger.insert(request("r2"));
        ledger.close();
        store.close().unwrap();
    }
    let db = TestDb::new("migrate");
    let out = migrate(&dir, &db);
    assert!(out.status.success(), "{out:?}");
    let pg = pg_store(&db, "a", std::time::Duration::from_secs(60));
    assert_eq!(
        pg.load_diffs("42").unwrap(),
        (1..=5).map(diff).collect::<Vec<_>>()
    );
    assert_eq!(pg.load_warm_deltas("43").unwrap()[&1], warm);
    assert_eq!(pg.get(ns::ESCROWS, "42").unwrap(), Some(json!({"a": 1})));
    assert_eq!(pg.get(ns::SETTINGS, "settings").unwrap(), Some(json!("✓")));
    assert_eq!(db.count("ledger_requests"), 2);
    assert_eq!(db.count("ledger_attempts"), 2);
    // The moved escrows resume where they were.
    pg.claim_escrow("42").unwrap();
    pg.append_diff("42", &diff(6)).await.unwrap();
    drop(pg);

    let again = migrate(&dir, &db);
    assert!(!again.status.success(), "{again:?}");
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("not empty"), "{text}");
    assert_eq!(db.count("diffs"), 7, "the refused run wrote nothing");
}
