//! The escrow actor on the PostgreSQL store when another replica takes its escrow over: the
//! append under the lost lease fails, the escrow stops (stage `lease_lost`, metric
//! `escrow_leases_lost_total`), its request gets a clear 503, and nothing of it lands in the log
//! the new owner resumes from.

use std::{sync::Arc, time::Duration};

use devshard_actors::{escrow::EscrowConfig, store::Store};
use devshard_gateway::{
    sim::{Profile, SimConfig},
    store::postgres::{PgStore, ReplicaConfig},
};

use super::{
    harness::{Answer, Harness},
    pgdb::TestDb,
};

fn replica(db: &TestDb, id: &str) -> PgStore {
    let replica = ReplicaConfig {
        id: id.into(),
        // No renewal runs during the test: the takeover below expires the lease by hand.
        lease_ttl: Duration::from_secs(600),
        advertise_url: String::new(),
    };
    PgStore::open_config(
        db.config(),
        replica,
        slog::Logger::root(slog::Discard, slog::o!()),
    )
    .unwrap()
}

#[actix_rt::test]
async fn an_escrow_whose_lease_is_taken_over_stops_and_answers_503() {
    let db = TestDb::new("gateway_lease");
    let a = Arc::new(replica(&db, "a"));
    let mut cfg = SimConfig::with_seed("lease");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = vec!["42".into()];
    let h = Harness::start_with(cfg, a.clone(), EscrowConfig::default()).await;
    assert_eq!(a.held_leases(), [("42".to_string(), 1)], "claimed at spawn");
    for i in 0..3 {
        let answer = h
            .chat_on(Some("42"), Harness::body(&format!("a-{i}"), i == 1))
            .await;
        assert!(answer.is_success(), "{answer:?}");
    }
    let durable = a.load_diffs("42").unwrap();
    assert!(!durable.is_empty());

    // Replica B takes the expired lease over.
    db.execute("UPDATE escrow_leases SET expires_at = now() - interval '1 second'")
        .unwrap();
    let b = replica(&db, "b");
    b.claim_escrow("42").unwrap();

    let answer = h.chat_on(Some("42"), Harness::body("after", false)).await;
    let Answer::Failed(failure) = &answer else {
        panic!("the fenced escrow must not serve: {answer:?}");
    };
    assert_eq!(failure.status, 503, "{answer:?}");
    assert_eq!(h.metrics.escrow_leases_lost.get(), 1);
    let log = b.load_diffs("42").unwrap();
    assert_eq!(log, durable, "nothing of A's lands after the takeover");
    // B resumes at the next durable nonce.
    let mut next = durable[durable.len() - 1].clone();
    next.nonce += 1;
    b.append_diff("42", &next).await.unwrap();
    // A's respawn cannot claim the escrow back while B holds it.
    let again = h.chat_on(Some("42"), Harness::body("again", false)).await;
    assert!(!again.is_success(), "{again:?}");
    assert_eq!(b.load_diffs("42").unwrap().len(), durable.len() + 1);
}
