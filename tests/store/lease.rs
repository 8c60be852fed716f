//! Fenced escrow leases on one PostgreSQL database shared by two store instances (two replica
//! ids): who may append, what happens to the loser's appends, renewal and release.

use std::time::Duration;

use devshard_actors::store::{Store, StoreError};
use serde_json::json;

use crate::{db::pg_store, pgdb::TestDb, support::diff};

/// Long enough that no renewal runs during a test that expires leases by hand.
const LONG_TTL: Duration = Duration::from_secs(600);

/// Makes every lease of `escrow` expired, as if its owner had stopped renewing (SIGSTOP).
fn expire(db: &TestDb, escrow: &str) {
    db.execute(&format!(
        "UPDATE escrow_leases SET expires_at = now() - interval '1 second' \
         WHERE escrow_id = '{escrow}'"
    ))
    .unwrap();
}

pub async fn a_takeover_fences_the_old_owner_and_the_new_one_resumes_at_the_next_nonce() {
    let db = TestDb::new("takeover");
    let a = pg_store(&db, "a", LONG_TTL);
    let b = pg_store(&db, "b", LONG_TTL);
    a.claim_escrow("e").unwrap();
    for n in 1..=3 {
        a.append_diff("e", &diff(n)).await.unwrap();
    }
    // A live lease is not taken, and B cannot append under a lease it does not hold.
    assert_eq!(
        b.claim_escrow("e"),
        Err(StoreError::LeaseHeld {
            escrow: "e".into(),
            owner: "a".into()
        })
    );
    assert!(matches!(
        b.append_diff("e", &diff(4)).await,
        Err(StoreError::LeaseLost { .. })
    ));

    expire(&db, "e");
    b.claim_escrow("e").unwrap();
    assert_eq!(b.held_leases(), [("e".to_string(), 2)]);
    // A's next append, and a write issued with it, in one group: the append fails alone.
    let lost = a.append_diff("e", &diff(4));
    let put = a.put("ns", "k", json!(1));
    assert_eq!(
        lost.await,
        Err(StoreError::LeaseLost {
            escrow: "e".into(),
            epoch: 1
        })
    );
    put.await.unwrap();
    assert_eq!(
        b.load_diffs("e").unwrap(),
        (1..=3).map(diff).collect::<Vec<_>>(),
        "nothing of A's lands after the takeover"
    );
    // B resumes at the next durable nonce; A stays fenced.
    b.append_diff("e", &diff(4)).await.unwrap();
    assert!(matches!(
        a.append_diff("e", &diff(5)).await,
        Err(StoreError::LeaseLost { epoch: 1, .. })
    ));
    b.append_diff("e", &diff(5)).await.unwrap();
    assert_eq!(
        a.load_diffs("e").unwrap(),
        (1..=5).map(diff).collect::<Vec<_>>()
    );
    // Another escrow of A is untouched.
    a.claim_escrow("other").unwrap();
    a.append_diff("other", &diff(1)).await.unwrap();
}

pub async fn leases_are_renewed_while_held_and_released_on_close() {
    let db = TestDb::new("renew");
    let ttl = Duration::from_millis(600);
    let a = pg_store(&db, "a", ttl);
    let b = pg_store(&db, "b", ttl);
    a.claim_escrow("e").unwrap();
    // Three TTLs later A still holds it: the renewals (every TTL/3) kept it alive.
    tokio::time::sleep(ttl * 3).await;
    assert!(matches!(
        b.claim_escrow("e"),
        Err(StoreError::LeaseHeld { .. })
    ));
    a.append_diff("e", &diff(1)).await.unwrap();
    // Both heartbeats are live; the view shows A's lease with time left by the database clock.
    let view = b.replica_view().unwrap();
    assert_eq!(view.live_replicas, ["a", "b"]);
    let lease = &view.leases[0];
    assert_eq!((lease.owner.as_str(), lease.epoch), ("a", 1));
    assert!(
        lease.expires_in_ms > 0 && lease.expires_in_ms <= 600,
        "{lease:?}"
    );
    // Releasing one escrow frees it at once and stops its renewals: B takes it, A is fenced.
    a.claim_escrow("f").unwrap();
    a.release_escrow("f").unwrap();
    assert_eq!(a.held_leases(), [("e".to_string(), 1)]);
    b.claim_escrow("f").unwrap();
    assert!(matches!(
        a.append_diff("f", &diff(1)).await,
        Err(StoreError::LeaseLost { .. })
    ));
    // Closing releases it at once, long before it would expire, and A's heartbeat row goes.
    a.close().unwrap();
    assert_eq!(b.replica_view().unwrap().live_replicas, ["b"]);
    b.claim_escrow("e").unwrap();
    b.append_diff("e", &diff(2)).await.unwrap();
    assert_eq!(
        b.held_leases(),
        [("e".to_string(), 2), ("f".to_string(), 2)]
    );
    // A restarted replica with the same id takes its own lease back with a new epoch, which
    // fences the store that held the old one.
    let b2 = pg_store(&db, "b", ttl);
    b2.claim_escrow("e").unwrap();
    assert!(matches!(
        b.append_diff("e", &diff(3)).await,
        Err(StoreError::LeaseLost { epoch: 2, .. })
    ));
    b2.append_diff("e", &diff(3)).await.unwrap();
}

pub async fn a_newer_schema_is_refused() {
    let db = TestDb::new("schema");
    drop(pg_store(&db, "a", LONG_TTL));
    db.execute("UPDATE schema_version SET version = version + 1")
        .unwrap();
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let replica = devshard_gateway::store::postgres::ReplicaConfig {
        id: "a".into(),
        lease_ttl: LONG_TTL,
        advertise_url: String::new(),
    };
    let err = devshard_gateway::store::postgres::PgStore::open_config(db.config(), replica, log)
        .unwrap_err();
    assert!(err.to_string().contains("newer than this binary"), "{err}");
}
