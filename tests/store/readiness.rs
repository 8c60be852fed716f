//! Readiness of a replica on PostgreSQL (`PgStore::readiness`, behind `/readyz`): not ready
//! before it claims a lease, ready once it holds a fresh one, not ready when its database stops
//! answering (its own connections are terminated: nothing shared is stopped).

use std::time::Duration;

use devshard_actors::store::Store;
use devshard_gateway::store::postgres::{readiness::NotReady, PgStore, ReplicaConfig};

use crate::pgdb::TestDb;

pub async fn readiness_follows_lease_ownership_and_database_reachability() {
    let db = TestDb::new("readiness");
    let app = format!(
        "readyz-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let mut config = db.config();
    config.application_name(&app);
    let replica = ReplicaConfig {
        id: "r1".into(),
        lease_ttl: Duration::from_secs(3),
        advertise_url: String::new(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let store = PgStore::open_config(config, replica, log).unwrap();

    // Started, no lease claimed yet.
    assert_eq!(store.readiness().await, Err(NotReady::NoLease));

    store.claim_escrow("e1").unwrap();
    assert_eq!(store.readiness().await, Ok(()));
    // Renewals (every second) keep it ready past the TTL.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(store.readiness().await, Ok(()));

    // The database goes away for this replica: its connections are cut.
    db.execute(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}'"
    ))
    .unwrap();
    let err = store.readiness().await.unwrap_err();
    assert_eq!(err.code(), "database_unreachable", "{err}");
    assert!(err.to_string().contains("unreachable"), "{err}");
}
