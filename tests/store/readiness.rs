//! Readiness of a replica on PostgreSQL (`PgStore::readiness`, behind `/readyz`): not ready
//! before the directory's first ownership round, ready after it even without a lease (its
//! heartbeat is fresh), still ready with a lease renewed past the TTL, not ready when its
//! database stops answering (its own connections are terminated: nothing shared is stopped).

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

    // Started, no ownership round yet.
    assert_eq!(store.readiness().await, Err(NotReady::OwnershipPending));
    // A round that claimed nothing: ready once the first heartbeat landed.
    store.ownership_round_done();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.readiness().await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let view = store.replica_view().unwrap();
    assert_eq!(view.live_replicas, ["r1"]);
    assert!(view.leases.is_empty());

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
