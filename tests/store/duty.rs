//! One-replica duties on one PostgreSQL database shared by two replicas: only the holder of a
//! duty's lease leads it, the other's fenced writes (rotation's deposits and creation intents,
//! an escrow's settlement record) are refused, and a takeover fences the previous leader.

use std::time::Duration;

use devshard_actors::store::{Store, StoreError};
use devshard_gateway::store::duty::{Duty, Leadership, ROTATION};
use serde_json::json;

use crate::{db::pg_store, pgdb::TestDb};

const LONG_TTL: Duration = Duration::from_secs(600);

fn duty(store: std::sync::Arc<dyn Store>) -> Duty {
    Duty::new(
        ROTATION,
        store,
        None,
        slog::Logger::root(slog::Discard, slog::o!()),
    )
}

pub async fn only_the_leader_runs_a_duty_and_a_takeover_fences_the_old_one() {
    let db = TestDb::new("duty");
    let a = std::sync::Arc::new(pg_store(&db, "a", LONG_TTL));
    let b = std::sync::Arc::new(pg_store(&db, "b", LONG_TTL));
    let (duty_a, duty_b) = (duty(a.clone()), duty(b.clone()));
    assert_eq!(duty_a.lead(), Leadership::Leading);
    assert_eq!(duty_a.lead(), Leadership::Leading, "held: no new claim");
    assert_eq!(
        duty_b.lead(),
        Leadership::Elsewhere { owner: "a".into() },
        "a live duty lease is not taken"
    );
    // The double run is refused where it matters: at the write, in the database.
    a.put_fenced(
        ROTATION,
        "rotation_deposit",
        "m",
        json!({"day": 1, "total": 10}),
    )
    .await
    .unwrap();
    assert!(matches!(
        b.put_fenced(
            ROTATION,
            "rotation_deposit",
            "m",
            json!({"day": 1, "total": 20})
        )
        .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(
        b.get("rotation_deposit", "m").unwrap(),
        Some(json!({"day": 1, "total": 10}))
    );
    // An escrow's settlement record is fenced by the escrow's own lease in the same way.
    a.claim_escrow("42").unwrap();
    a.put_fenced("42", "settlement", "42", json!({"state": "draining"}))
        .await
        .unwrap();
    assert!(matches!(
        b.put_fenced("42", "settlement", "42", json!({"state": "broadcast"}))
            .await,
        Err(StoreError::LeaseLost { .. })
    ));

    // A stops renewing (SIGSTOP): B takes the duty over once it expired, and A is fenced.
    db.execute(&format!(
        "UPDATE escrow_leases SET expires_at = now() - interval '1 second' \
         WHERE escrow_id = '{ROTATION}'"
    ))
    .unwrap();
    assert_eq!(duty_b.lead(), Leadership::Leading);
    assert!(
        a.holds_lease(ROTATION),
        "A has not noticed yet (no renewal ran)"
    );
    assert!(matches!(
        a.put_fenced(
            ROTATION,
            "rotation_deposit",
            "m",
            json!({"day": 1, "total": 30})
        )
        .await,
        Err(StoreError::LeaseLost { .. })
    ));
    b.put_fenced(
        ROTATION,
        "rotation_deposit",
        "m",
        json!({"day": 1, "total": 40}),
    )
    .await
    .unwrap();
    assert_eq!(
        a.get("rotation_deposit", "m").unwrap(),
        Some(json!({"day": 1, "total": 40}))
    );
    // A duty lease does not make a replica ready (only escrows serve).
    assert_eq!(b.held_leases(), [(ROTATION.to_string(), 2)]);
    assert!(b.readiness().await.is_err());
    // B leaves (SIGTERM): its release lets A lead again at once.
    b.close().unwrap();
    let a_again = duty(a.clone());
    assert_eq!(a_again.lead(), Leadership::Leading);
}
