//! A PostgreSQL restart under the store (`PgStore`, `link.rs`): while the server is stopped every
//! operation fails at once with `StoreError::Unavailable`, nothing unpersisted is acked, and once
//! it is started again the same store (never reopened) serves again by itself.

use std::time::{Duration, Instant};

use devshard_actors::store::{Store, StoreError};
use devshard_gateway::store::postgres::{PgStore, ReplicaConfig};

use crate::{pgdb::Cluster, support::diff};

/// Generous bound for "fails at once" and "comes back": a hang would hit it, a slow machine not.
const DEADLINE: Duration = Duration::from_secs(30);

fn unavailable<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    assert!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "expected Unavailable, got {r:?}"
    );
}

/// Polls `f` until it returns `Some`, within [`DEADLINE`].
async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn operations_fail_typed_while_the_server_is_down_and_recover_without_reopening() {
    let cluster = Cluster::start("outage");
    let replica = ReplicaConfig {
        id: "r1".into(),
        lease_ttl: Duration::from_secs(10),
        advertise_url: String::new(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let store = PgStore::open_config(cluster.config(), replica, log).unwrap();
    store.claim_escrow("e").unwrap();
    store.append_diff("e", &diff(1)).await.unwrap();
    store.put("ns", "k", serde_json::json!(1)).await.unwrap();
    assert!(store
        .connections()
        .iter()
        .all(|c| c.up && c.reconnects == 0));

    cluster.pg_stop();
    // Every kind of operation fails typed, and fast (the deadline only catches a hang).
    let started = Instant::now();
    unavailable(store.append_diff("e", &diff(2)).await);
    unavailable(store.put("ns", "k", serde_json::json!(2)).await);
    unavailable(store.get("ns", "k"));
    unavailable(store.load_diffs("e"));
    unavailable(store.claim_escrow("e"));
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
    eventually("every connection seen down", || {
        store.connections().iter().all(|c| !c.up).then_some(())
    })
    .await;
    let err = store.readiness().await.unwrap_err();
    assert_eq!(err.code(), "database_unreachable", "{err}");

    cluster.pg_start();
    // The same store reconnects by itself; the escrow's respawn claims again (new epoch) and
    // rereads the log: the nonce that failed was not written, so it is the next one again.
    let epoch = eventually("the claim succeeds again", || {
        store.claim_escrow("e").ok()?;
        store.held_leases().first().map(|(_, n)| *n)
    })
    .await;
    assert_eq!(epoch, 2);
    // The claim's connection is back; a read may meet another that is still reconnecting (a
    // typed `Unavailable`, which callers retry), so it too is awaited (CI's loaded machine).
    let log = eventually("the log reads again", || store.load_diffs("e").ok()).await;
    assert_eq!(log, vec![diff(1)]);
    eventually("every connection back", || {
        let c = store.connections();
        c.iter().all(|c| c.up && c.reconnects >= 1).then_some(())
    })
    .await;
    store.append_diff("e", &diff(2)).await.unwrap();
    store.put("ns", "k", serde_json::json!(2)).await.unwrap();
    assert_eq!(store.load_diffs("e").unwrap(), vec![diff(1), diff(2)]);
    assert_eq!(store.get("ns", "k").unwrap(), Some(serde_json::json!(2)));
    // No directory runs here: its first ownership round is what readiness also waits for.
    store.ownership_round_done();
    assert_eq!(store.readiness().await, Ok(()));
}

/// Appends composed after one that failed (same epoch, still queued) fail alike, so the log never
/// gets a gap; the respawned escrow (a new claim) appends after the log again.
pub async fn appends_queued_behind_a_failed_one_never_leave_a_gap() {
    let cluster = Cluster::start("gap");
    let replica = ReplicaConfig {
        id: "r1".into(),
        lease_ttl: Duration::from_secs(10),
        advertise_url: String::new(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let store = PgStore::open_config(cluster.config(), replica, log).unwrap();
    store.claim_escrow("e").unwrap();
    store.append_diff("e", &diff(1)).await.unwrap();
    cluster.pg_stop();
    unavailable(store.append_diff("e", &diff(2)).await);
    cluster.pg_start();
    eventually("every connection back", || {
        store.connections().iter().all(|c| c.up).then_some(())
    })
    .await;
    // Same epoch as the failed nonce 2: refused even though the database is back.
    let r = store.append_diff("e", &diff(3)).await;
    assert!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "nonce 3 must fail like nonce 2: {r:?}"
    );
    assert_eq!(store.load_diffs("e").unwrap(), vec![diff(1)]);
    store.claim_escrow("e").unwrap();
    store.append_diff("e", &diff(2)).await.unwrap();
    assert_eq!(store.load_diffs("e").unwrap(), vec![diff(1), diff(2)]);
}
