//! Escrow budgets shared between two replicas on one PostgreSQL database (rotation across
//! replicas): a publication lands only under the lease its owner holds, never over a newer
//! epoch's, and is read back with its owner, epoch, age and the escrow's durable nonce.

use std::time::Duration;

use devshard_actors::store::Store;
use devshard_gateway::store::postgres::budgets::{BudgetReport, SharedBudget};

use crate::{db::pg_store, pgdb::TestDb, support::diff};

const LONG_TTL: Duration = Duration::from_secs(600);

fn report(nonce: u64, spendable: u64) -> BudgetReport {
    BudgetReport { nonce, spendable }
}

pub async fn budgets_are_published_under_the_lease_and_read_with_age_and_durable_nonce() {
    let db = TestDb::new("budgets");
    let a = pg_store(&db, "a", LONG_TTL);
    let b = pg_store(&db, "b", LONG_TTL);
    a.claim_escrow("42").unwrap();
    let published = a
        .publish_budgets(&[("42".into(), report(3, 900)), ("43".into(), report(1, 5))])
        .await
        .unwrap();
    assert_eq!(published, 1, "only the escrow whose lease a holds");
    assert_eq!(
        b.publish_budgets(&[("42".into(), report(99, 1))])
            .await
            .unwrap(),
        0,
        "b does not hold the lease"
    );
    for n in 1..=5 {
        a.append_diff("42", &diff(n)).await.unwrap();
    }
    let read = b.shared_budgets(&["43".into(), "42".into()]).await.unwrap();
    assert_eq!(
        read[0],
        SharedBudget {
            escrow_id: "43".into(),
            durable_nonce: 0,
            published: None
        }
    );
    assert_eq!(read[1].durable_nonce, 5);
    let p = read[1].published.clone().unwrap();
    assert_eq!(
        (p.owner.as_str(), p.epoch, p.report),
        ("a", 1, report(3, 900))
    );
    assert!(
        (0..60_000).contains(&p.age_ms),
        "age by the database's clock: {}",
        p.age_ms
    );

    // b takes the escrow over once a's lease expired (a does not know yet): b's figures land,
    // a's under its old epoch no longer do, in the database itself.
    db.execute(
        "UPDATE escrow_leases SET expires_at = now() - interval '1 second' \
         WHERE escrow_id = '42'",
    )
    .unwrap();
    b.claim_escrow("42").unwrap();
    assert_eq!(
        b.publish_budgets(&[("42".into(), report(6, 800))])
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        a.publish_budgets(&[("42".into(), report(7, 700))])
            .await
            .unwrap(),
        0,
        "a lost the lease: fenced"
    );
    let p = a.shared_budgets(&["42".into()]).await.unwrap()[0]
        .published
        .clone()
        .unwrap();
    assert_eq!(
        (p.owner.as_str(), p.epoch, p.report),
        ("b", 2, report(6, 800))
    );
}
