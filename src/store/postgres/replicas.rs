//! What one replica reads and writes about the others: the `replicas` rows (where each is
//! reached), the live owners of escrows (for forwarding, `crate::replicas`), and the
//! notifications of shared events (`NOTIFY`, `crate::replicas::events`).
//!
//! [`announce_until_closed`] writes this replica's own `replicas` row at store open and keeps it
//! fresh every TTL/3. It stands in for the replica heartbeat of the ownership work (issue 14,
//! `renewals.rs`); once that heartbeat lands, the integrator keeps one of the two.

use serde::Serialize;
use slog::{warn, Logger};

use super::{lease, link::Link, pg_err, PgStore, ReplicaConfig};
use devshard_actors::store::{ns, StoreError};

/// An escrow whose lease another replica holds, with where that replica is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteEscrow {
    pub escrow_id: String,
    pub model: String,
    pub owner: String,
    pub address: String,
}

/// Upserts this replica's `replicas` row, live for one TTL.
pub(super) async fn announce(link: &Link, replica: &ReplicaConfig) -> Result<(), StoreError> {
    link.client()?
        .execute(
            "INSERT INTO replicas (replica_id, address, started_at, expires_at) \
             VALUES ($1, $2, now(), now() + make_interval(secs => $3)) \
             ON CONFLICT (replica_id) DO UPDATE SET address = EXCLUDED.address, \
             expires_at = EXCLUDED.expires_at",
            &[
                &replica.id,
                &replica.advertise_url,
                &replica.lease_ttl.as_secs_f64(),
            ],
        )
        .await
        .map_err(pg_err)?;
    Ok(())
}

/// Keeps this replica's `replicas` row live (every TTL/3) until the task is aborted; a failed
/// write is logged and retried at the next tick.
pub(super) async fn announce_until_closed(
    link: std::sync::Arc<Link>,
    replica: ReplicaConfig,
    log: Logger,
) {
    let mut tick = tokio::time::interval(lease::renew_every(replica.lease_ttl));
    loop {
        tick.tick().await;
        if let Err(e) = announce(&link, &replica).await {
            warn!(log, "replica row not written"; "stage" => "replica_announce_failed",
                "error" => %e);
        }
    }
}

/// Marks this replica's row expired (shutdown), so nothing is forwarded to it any more.
pub(super) async fn retire(link: &Link, replica: &str) -> Result<(), StoreError> {
    link.client()?
        .execute(
            "UPDATE replicas SET expires_at = now() WHERE replica_id = $1",
            &[&replica],
        )
        .await
        .map_err(pg_err)?;
    Ok(())
}

impl PgStore {
    /// Every escrow whose live lease is held by another live replica with an address, with its
    /// model (from its registration record). Awaited on the caller's runtime.
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
                 ORDER BY l.escrow_id",
                &[&ns::ESCROWS, &self.replica.id.as_str()],
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
    pub fn connect_config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Where the other replicas reach this one, and its id.
    pub fn replica(&self) -> &ReplicaConfig {
        &self.replica
    }
}
