//! The replicas sharing the database: each one's heartbeat row in `replicas (replica_id,
//! address, started_at, expires_at)`, timed by the database's clock like the leases, and the
//! view the directory's ownership loop plans from (live replicas and every escrow lease).

use devshard_actors::store::{LeaseView, ReplicaView, StoreError};
use tokio_postgres::Client;

use super::{pg_err, ReplicaConfig};

/// Upserts this replica's row: `expires_at = now() + TTL`; `started_at` is set by the first
/// heartbeat of a process (`first`) and kept by the later ones.
pub(super) async fn heartbeat(
    client: &Client,
    replica: &ReplicaConfig,
    first: bool,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO replicas (replica_id, address, started_at, expires_at) \
             VALUES ($1, $2, now(), now() + make_interval(secs => $3)) \
             ON CONFLICT (replica_id) DO UPDATE SET address = EXCLUDED.address, \
             expires_at = EXCLUDED.expires_at, \
             started_at = CASE WHEN $4 THEN EXCLUDED.started_at ELSE replicas.started_at END",
            &[
                &replica.id,
                &replica.advertise_url,
                &replica.lease_ttl.as_secs_f64(),
                &first,
            ],
        )
        .await
        .map_err(pg_err)?;
    Ok(())
}

/// Deletes this replica's row (it closes: the others stop counting it at once).
pub(super) async fn leave(client: &Client, replica: &str) -> Result<u64, StoreError> {
    client
        .execute("DELETE FROM replicas WHERE replica_id = $1", &[&replica])
        .await
        .map_err(pg_err)
}

/// The live replicas (heartbeat not expired) and every escrow lease, with its time to expiry by
/// the database's clock; `me` is left out of the next heartbeat expiry.
pub(super) async fn view(client: &Client, me: &str) -> Result<ReplicaView, StoreError> {
    let replicas = client
        .query(
            "SELECT replica_id, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint \
             FROM replicas WHERE expires_at > now() ORDER BY replica_id COLLATE \"C\"",
            &[],
        )
        .await
        .map_err(pg_err)?;
    let leases = client
        .query(
            "SELECT escrow_id, owner, epoch, \
             (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint FROM escrow_leases \
             ORDER BY escrow_id COLLATE \"C\"",
            &[],
        )
        .await
        .map_err(pg_err)?;
    let next_heartbeat_expiry_ms = (replicas.iter())
        .filter(|r| r.get::<_, &str>(0) != me)
        .map(|r| r.get::<_, i64>(1))
        .min();
    Ok(ReplicaView {
        live_replicas: replicas.iter().map(|r| r.get(0)).collect(),
        next_heartbeat_expiry_ms,
        leases: leases
            .iter()
            .map(|r| LeaseView {
                escrow_id: r.get(0),
                owner: r.get(1),
                epoch: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                expires_in_ms: r.get(3),
            })
            .collect(),
    })
}
