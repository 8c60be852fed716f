//! Group commit: concurrent writes share transactions, and an op that fails fails alone.

use std::{path::Path, time::Duration};

use devshard_actors::store::{Ack, Store, StoreError};
use devshard_gateway::store::SqliteStore;
use rusqlite::Connection;

use crate::support::{diff, TempDir};

/// Holds SQLite's write lock on the file from another connection, so that the store's writer
/// blocks in `BEGIN IMMEDIATE` (it waits up to its busy timeout) while ops pile up in its queue.
struct WriteLock(Connection);

impl WriteLock {
    fn take(db: &Path) -> WriteLock {
        let conn = Connection::open(db).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        WriteLock(conn)
    }

    fn release(self) {
        self.0.execute_batch("ROLLBACK").unwrap();
    }
}

/// Takes the write lock, sends one op and gives the writer time to pick it up and block on the
/// lock, so that everything issued next lands in the following group.
async fn stall_writer(store: &SqliteStore) -> (WriteLock, Ack) {
    let lock = WriteLock::take(store.path());
    let first = store.put("stall", "first", serde_json::json!(true));
    tokio::time::sleep(Duration::from_millis(200)).await;
    (lock, first)
}

pub async fn concurrent_appends_share_commits() {
    let dir = TempDir::new("group");
    let store = SqliteStore::open(dir.db()).unwrap();
    let started = std::time::Instant::now();
    let acks: Vec<Ack> = (1..=1000)
        .map(|n| store.append_diff("42", &diff(n)))
        .collect();
    for r in futures::future::join_all(acks).await {
        r.unwrap();
    }
    let elapsed = started.elapsed();
    let stats = store.stats();
    println!(
        "1000 appends in {elapsed:?} ({:.0}/s): {} groups, last group {}",
        1000.0 / elapsed.as_secs_f64(),
        stats.groups_committed,
        stats.last_group_size
    );
    assert_eq!(stats.ops_committed, 1000);
    assert!(
        stats.groups_committed < 1000,
        "no grouping happened: {stats:?}"
    );
    let log = store.load_diffs("42").unwrap();
    assert_eq!(log.len(), 1000);
    assert!(log.iter().zip(1..).all(|(d, n)| *d == diff(n)));
}

pub async fn queued_ops_commit_in_few_groups() {
    let dir = TempDir::new("stalled");
    let store = SqliteStore::open(dir.db()).unwrap();
    let (lock, first) = stall_writer(&store).await;
    let acks: Vec<Ack> = (1..=1000)
        .map(|n| store.append_diff("42", &diff(n)))
        .collect();
    lock.release();
    first.await.unwrap();
    for r in futures::future::join_all(acks).await {
        r.unwrap();
    }
    let stats = store.stats();
    // The stalled first op, then 1000 queued ops in groups of at most 512.
    assert!(stats.groups_committed <= 3, "{stats:?}");
    assert_eq!(stats.ops_committed, 1001);
    assert_eq!(store.load_diffs("42").unwrap().len(), 1000);
}

pub async fn out_of_order_append_fails_alone() {
    let dir = TempDir::new("order");
    let store = SqliteStore::open(dir.db()).unwrap();
    let (lock, first) = stall_writer(&store).await;
    // All of these are queued while the writer is stalled: they form one group.
    let a1 = store.append_diff("e", &diff(1));
    let a2 = store.append_diff("e", &diff(2));
    let dup = store.append_diff("e", &diff(2));
    let back = store.append_diff("e", &diff(1));
    let other = store.append_diff("f", &diff(1));
    let put = store.put("ns", "k", serde_json::json!({"v": 1}));
    let a3 = store.append_diff("e", &diff(3));
    let del = store.delete("ns", "missing");
    let flush = store.flush();
    lock.release();
    first.await.unwrap();

    a1.await.unwrap();
    a2.await.unwrap();
    let want = |last, got| StoreError::OutOfOrder {
        escrow: "e".into(),
        last,
        got,
    };
    assert_eq!(dup.await, Err(want(2, 2)));
    assert_eq!(back.await, Err(want(2, 1)));
    other.await.unwrap();
    put.await.unwrap();
    a3.await.unwrap();
    del.await.unwrap();
    flush.await.unwrap();

    let stats = store.stats();
    assert_eq!(stats.groups_committed, 2, "{stats:?}");
    assert_eq!(stats.last_group_size, 8, "{stats:?}");
    assert_eq!(stats.ops_committed, 1 + 6, "{stats:?}");
    let nonces: Vec<u64> = store
        .load_diffs("e")
        .unwrap()
        .iter()
        .map(|d| d.nonce)
        .collect();
    assert_eq!(nonces, [1, 2, 3]);
    assert_eq!(store.load_diffs("f").unwrap(), [diff(1)]);
    assert_eq!(
        store.get("ns", "k").unwrap(),
        Some(serde_json::json!({"v": 1}))
    );
    // A later append still sees the right last nonce.
    assert_eq!(store.append_diff("e", &diff(3)).await, Err(want(3, 3)));
    store.append_diff("e", &diff(10)).await.unwrap();
}

pub async fn writes_from_many_threads_keep_per_escrow_order() {
    let dir = TempDir::new("threads");
    let store = std::sync::Arc::new(SqliteStore::open(dir.db()).unwrap());
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let store = std::sync::Arc::clone(&store);
            std::thread::spawn(move || {
                let escrow = format!("escrow-{w}");
                let acks: Vec<Ack> = (1..=100)
                    .flat_map(|n| {
                        let key = format!("{n:03}");
                        [
                            store.append_diff(&escrow, &diff(n)),
                            store.put(&escrow, &key, serde_json::json!(n)),
                        ]
                    })
                    .collect();
                futures::executor::block_on(futures::future::join_all(acks))
            })
        })
        .collect();
    for w in workers {
        assert!(w.join().unwrap().into_iter().all(|r| r.is_ok()));
    }
    store.flush().await.unwrap();
    for w in 0..8 {
        let escrow = format!("escrow-{w}");
        let log = store.load_diffs(&escrow).unwrap();
        assert!(log.iter().map(|d| d.nonce).eq(1..=100));
        assert_eq!(store.list(&escrow).unwrap().len(), 100);
    }
    assert_eq!(store.stats().ops_committed, 1600);
}
