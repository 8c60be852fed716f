//! Settlement with several replicas on one PostgreSQL database: the actor of a replica that lost
//! the escrow's lease stops at its first record write, before the step acts, and writes nothing;
//! the lease's owner drives the settlement.

use std::{sync::Arc, time::Duration};

use devshard_actors::{
    settlement::{machine::SettlementState, StartSettlement, NS_SETTLEMENT},
    store::{SharedStore, Store},
};
use devshard_gateway::store::postgres::{PgStore, ReplicaConfig};

use crate::{
    client::config,
    flow::{actor, rig, wait_until},
    pgdb::TestDb,
};

fn replica(db: &TestDb, id: &str) -> Arc<PgStore> {
    let replica = ReplicaConfig {
        id: id.into(),
        // No renewal during the test: the takeover expires the lease by hand.
        lease_ttl: Duration::from_secs(600),
        advertise_url: String::new(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    Arc::new(PgStore::open_config(db.config(), replica, log).unwrap())
}

#[actix_rt::test]
async fn a_replica_that_lost_the_escrow_stops_its_settlement_and_the_owner_drives_it() {
    let db = TestDb::new("settle_lease");
    let (a, b) = (replica(&db, "a"), replica(&db, "b"));
    a.claim_escrow("42").unwrap();
    let rig = rig(config(4), 3).await;
    // A stops renewing; B takes the escrow over.
    db.execute("UPDATE escrow_leases SET expires_at = now() - interval '1 second'")
        .unwrap();
    b.claim_escrow("42").unwrap();

    let on_a = actor(&rig, a.clone() as SharedStore);
    let started = on_a
        .send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    assert!(started.is_some());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while on_a.connected() {
        assert!(std::time::Instant::now() < deadline, "A's actor still runs");
        // The stop follows the fenced write's commit on the store thread: poll it.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        b.get(NS_SETTLEMENT, "42").unwrap(),
        None,
        "nothing of A's settlement landed"
    );

    let on_b = actor(&rig, b.clone() as SharedStore);
    on_b.send(StartSettlement { broadcast: true })
        .await
        .unwrap();
    // The owner gets past draining: its record writes are not fenced.
    wait_until(&on_b, 60, |r| {
        !matches!(r.state, SettlementState::Active | SettlementState::Draining)
    })
    .await;
    assert!(
        b.get(NS_SETTLEMENT, "42").unwrap().is_some(),
        "the owner's record is durable"
    );
}
