//! The cost ledger's tables on either database, through [`LedgerStore`]: rows inserted once,
//! attempts settled once, a request's costs completed by its last attempt, pages, unsettled
//! attempts and retention; rows written by one replica are read by another (PostgreSQL).

use devshard_gateway::store::ledger::{AttemptRow, LedgerStore, RequestRow, Settlement};
use devshard_gateway::store::postgres::PgTarget;

use crate::db::Db;

fn attempt(nonce: u64) -> AttemptRow {
    AttemptRow {
        nonce,
        host: "host-a".into(),
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
    }
}

fn row(id: &str, ended_ms: i64, nonces: &[u64]) -> RequestRow {
    RequestRow {
        request_id: id.into(),
        started_ms: ended_ms - 5,
        ended_ms,
        model: "m".into(),
        escrow_id: "42".into(),
        api_key_id: "key_0123".into(),
        stream: true,
        outcome: "completed".into(),
        status: 200,
        winner_nonce: nonces.first().copied(),
        input_tokens: None,
        output_tokens: None,
        reserved_cost: None,
        actual_cost: None,
        total_cost: None,
        settled_ms: None,
        attempts: nonces.iter().copied().map(attempt).collect(),
    }
}

fn settled(nonce: u64, actual: u64, at: i64) -> Settlement {
    Settlement {
        escrow_id: "42".into(),
        nonce,
        inference: "finished".into(),
        input_tokens: 3,
        output_tokens: 4,
        reserved_cost: 70,
        actual_cost: actual,
        fee: 5,
        settled_ms: at,
    }
}

/// The ledger of `db` (the store opened first: it creates or migrates the tables).
fn open(db: &Db) -> LedgerStore {
    match db {
        Db::Sqlite(dir) => LedgerStore::open(&dir.db()).unwrap(),
        Db::Postgres(pg) => {
            let log = slog::Logger::root(slog::Discard, slog::o!());
            LedgerStore::open_postgres(&PgTarget::from_config(pg.config()), log).unwrap()
        }
    }
}

pub async fn rows_settle_once_and_any_instance_reads_them(db: Db) {
    let store = db.open_as("replica-a", std::time::Duration::from_secs(10));
    {
        let a = open(&db);
        a.insert(row("old", 1_000, &[1]));
        a.insert(row("new", 9_000, &[2, 3]));
        a.insert(row("new", 9_999, &[7]));
        a.insert(row("none", 9_500, &[]));
        // The winner settles first: the request waits for its loser.
        a.settle(vec![settled(2, 14, 9_100)]);
        a.flush();
        let new = a.get("new").unwrap().unwrap();
        assert_eq!(
            new.ended_ms, 9_000,
            "a second insert of a request is ignored"
        );
        assert_eq!((new.settled_ms, new.total_cost), (None, None));
        assert_eq!(new.attempts[0].cost, Some(19));
        a.settle(vec![settled(3, 1, 9_200), settled(2, 99, 9_300)]);
        a.close();
        let registry = prometheus::Registry::new();
        a.register_metrics(&registry).unwrap();
        let committed = registry
            .gather()
            .iter()
            .filter(|f| f.name() == "ledger_batches_total")
            .flat_map(|f| f.get_metric())
            .filter(|m| m.get_label().iter().any(|l| l.value() == "committed"))
            .map(|m| m.get_counter().get_value())
            .sum::<f64>();
        assert!(committed >= 2.0, "batches counted: {committed}");
    }
    // Another instance (on PostgreSQL: another replica) reads what the first wrote.
    let b = open(&db);
    let new = b
        .get("new")
        .unwrap()
        .expect("written by the other instance");
    assert_eq!(
        (new.actual_cost, new.total_cost, new.settled_ms),
        (Some(14), Some(19 + 6), Some(9_200)),
        "costs of the winner, total of every attempt, each settled once"
    );
    assert_eq!((new.input_tokens, new.output_tokens), (Some(3), Some(4)));
    assert!(new.stream);
    assert_eq!(new.attempts.len(), 2);
    let none = b.get("none").unwrap().unwrap();
    assert_eq!((none.total_cost, none.settled_ms), (Some(0), Some(9_500)));
    assert_eq!(b.unsettled().unwrap(), vec![("42".to_string(), 1)]);
    let page: Vec<String> = b
        .page(0, i64::MAX, None, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.request_id)
        .collect();
    assert_eq!(page, ["old", "new", "none"], "by ended_ms");
    let after = b
        .page(0, i64::MAX, Some((9_000, "new".into())), 10)
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(
        b.page(0, 9_000, None, 10).unwrap().len(),
        1,
        "until is exclusive"
    );
    b.prune(5_000);
    b.flush();
    assert!(b.get("old").unwrap().is_none(), "retention deleted it");
    assert!(b.unsettled().unwrap().is_empty(), "with its attempts");
    b.close();
    store.close().unwrap();
}
