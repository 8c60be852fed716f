//! The replicas sharing the database: each one's heartbeat row in `replicas (replica_id,
//! address, started_at, expires_at)`, timed by the database's clock like the leases (written by
//! the renewal task, `renewals.rs`), the view the directory's ownership loop plans from (live
//! replicas and every escrow lease), the live owners of escrows with their addresses (for
//! forwarding, `crate::replicas`), and the notifications of shared events (`NOTIFY`,
//! `crate::replicas::events`).

use devshard_actors::store::{ns, LeaseView, ReplicaView, StoreError};
use serde::Serialize;
use tokio_postgres::Client;

use super::{pg_err, PgStore, ReplicaConfig};

/// An escrow whose lease another replica holds, with where that replica is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteEscrow {
    pub escrow_id: String,
    pub model: String,
    pub owner: String,
    pub address: String,
}

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
        // Duty leases (rotation, …) are not escrows: the ownership loop never plans them.
        leases: leases
            .iter()
            .filter(|r| !crate::store::duty::is_duty(r.get::<_, &str>(0)))
            .map(|r| LeaseView {
                escrow_id: r.get(0),
                owner: r.get(1),
                epoch: u64::try_from(r.get::<_, i64>(2)).unwrap_or(0),
                expires_in_ms: r.get(3),
            })
            .collect(),
    })
}

impl PgStore {
    /// Every escrow whose live lease is held by another live replica with an address, with its
    /// model (from its registration record), that has no settlement record (draining, settling
    /// or settled escrows take no new request: forwarding to one of them, when its owner has no
    /// other escrow of the model, answered `forward_hop_limit`). Awaited on the caller's runtime.
    pub async fn remote_escrows(&self) -> Result<Vec<RemoteEscrow>, StoreError> {
        let rows = self
            .reader
            .client()?
            .query(
                "SELECT l.escrow_id, (rec.value::jsonb) ->> 'model', l.owner, r.address \
                 FROM escrow_leases l \
                 JOIN replicas r ON r.replica_id = l.owner \
                 JOIN records rec ON rec.namespace = $1 AND rec.key = l.escrow_id \
                 WHERE l.expires_at > now() AND r.expires_at > now() AND r.address <> '' \
                   AND l.owner <> $2 \
                   AND NOT EXISTS (SELECT 1 FROM records s \
                       WHERE s.namespace = $3 AND s.key = l.escrow_id) \
                 ORDER BY l.escrow_id",
                &[
                    &ns::ESCROWS,
                    &self.replica.id.as_str(),
                    &devshard_actors::settlement::NS_SETTLEMENT,
                ],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows
            .iter()
            .map(|r| RemoteEscrow {
                escrow_id: r.get(0),
                model: r.get::<_, Option<String>>(1).unwrap_or_default(),
                owner: r.get(2),
                address: r.get(3),
            })
            .collect())
    }

    /// Whether this replica holds the lease of `escrow`.
    pub fn holds(&self, escrow: &str) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(escrow)
    }

    /// `NOTIFY channel, payload` (awaited on the caller's runtime).
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        self.reader
            .client()?
            .execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
            .await
            .map_err(pg_err)?;
        Ok(())
    }

    /// The schema this store's tables live in (`current_schema()`).
    pub async fn schema(&self) -> Result<String, StoreError> {
        let row = self
            .reader
            .client()?
            .query_one("SELECT current_schema()::text", &[])
            .await
            .map_err(pg_err)?;
        Ok(row.get(0))
    }

    /// The connection settings, for a connection of one's own (the events listener).
    pub fn connect_target(&self) -> &super::PgTarget {
        &self.target
    }

    /// Where the other replicas reach this one, and its id.
    pub fn replica(&self) -> &ReplicaConfig {
        &self.replica
    }
}
