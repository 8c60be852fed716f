//! The store a gateway runs on: embedded SQLite (the default, one process) or PostgreSQL (several
//! replicas, fenced escrow leases), chosen by [`StoreTarget`].

use std::path::PathBuf;

use devshard_actors::{
    protocol::{diff::Diff, warm::WarmBinding},
    store::{Ack, ReplicaIdentity, ReplicaView, Store, StoreError, WarmDeltas},
};
use slog::Logger;

use super::{
    postgres::{LinkStatus, PgStore, PgTarget, ReplicaConfig},
    SqliteStore, StoreStats,
};

/// Where the store lives (`Debug` prints the URL without its password).
#[derive(Clone)]
pub enum StoreTarget {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgres://…`, as configured; `target`: with its TLS settings
    /// checked), shared by the replicas.
    Postgres {
        url: String,
        target: Box<PgTarget>,
        replica: ReplicaConfig,
    },
}

impl std::fmt::Debug for StoreTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreTarget::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            StoreTarget::Postgres {
                replica, target, ..
            } => f
                .debug_struct("Postgres")
                .field("url", &self.describe())
                .field("sslmode", &target.mode())
                .field("replica", replica)
                .finish(),
        }
    }
}

impl StoreTarget {
    /// What to log: the file, or the URL without its password.
    pub fn describe(&self) -> String {
        match self {
            StoreTarget::Sqlite(path) => path.display().to_string(),
            StoreTarget::Postgres { url, .. } => redact_url(url),
        }
    }
}

/// A `postgres://user:password@host/db` URL with the password replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((auth, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// The gateway's store, of either kind.
#[derive(Debug)]
pub enum GatewayStore {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl GatewayStore {
    /// Opens (and migrates) the store at `target`.
    pub fn open(target: &StoreTarget, log: Logger) -> Result<GatewayStore, StoreError> {
        Ok(match target {
            StoreTarget::Sqlite(path) => GatewayStore::Sqlite(SqliteStore::open_logged(path, log)?),
            StoreTarget::Postgres {
                target, replica, ..
            } => GatewayStore::Postgres(PgStore::open_target(
                PgTarget::clone(target),
                replica.clone(),
                log,
            )?),
        })
    }

    /// Group-commit counters.
    pub fn stats(&self) -> StoreStats {
        match self {
            GatewayStore::Sqlite(s) => s.stats(),
            GatewayStore::Postgres(s) => s.stats(),
        }
    }

    /// The database connections and whether each is up (PostgreSQL; SQLite has none).
    pub fn connections(&self) -> Vec<LinkStatus> {
        match self {
            GatewayStore::Sqlite(_) => Vec::new(),
            GatewayStore::Postgres(s) => s.connections(),
        }
    }

    /// Commits what was issued and stops the writer (PostgreSQL: and releases the leases).
    pub fn close(&self) -> Result<(), StoreError> {
        match self {
            GatewayStore::Sqlite(s) => s.close(),
            GatewayStore::Postgres(s) => s.close(),
        }
    }

    fn inner(&self) -> &dyn Store {
        match self {
            GatewayStore::Sqlite(s) => s,
            GatewayStore::Postgres(s) => s,
        }
    }
}

impl Store for GatewayStore {
    fn append_diff_with_warm(&self, escrow_id: &str, diff: &Diff, warm: &[WarmBinding]) -> Ack {
        self.inner().append_diff_with_warm(escrow_id, diff, warm)
    }
    fn load_warm_deltas(&self, escrow_id: &str) -> Result<WarmDeltas, StoreError> {
        self.inner().load_warm_deltas(escrow_id)
    }
    fn load_diffs(&self, escrow_id: &str) -> Result<Vec<Diff>, StoreError> {
        self.inner().load_diffs(escrow_id)
    }
    fn load_diffs_from(&self, escrow_id: &str, from: u64) -> Result<Vec<Diff>, StoreError> {
        self.inner().load_diffs_from(escrow_id, from)
    }
    fn load_diffs_range(
        &self,
        escrow_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<Diff>, StoreError> {
        self.inner().load_diffs_range(escrow_id, from, to)
    }
    fn delete_diffs(&self, escrow_id: &str) -> Ack {
        self.inner().delete_diffs(escrow_id)
    }
    fn put(&self, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        self.inner().put(namespace, key, value)
    }
    fn delete(&self, namespace: &str, key: &str) -> Ack {
        self.inner().delete(namespace, key)
    }
    fn get(&self, namespace: &str, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        self.inner().get(namespace, key)
    }
    fn list(&self, namespace: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        self.inner().list(namespace)
    }
    fn flush(&self) -> Ack {
        self.inner().flush()
    }
    fn claim_escrow(&self, escrow_id: &str) -> Result<(), StoreError> {
        self.inner().claim_escrow(escrow_id)
    }
    fn holds_lease(&self, id: &str) -> bool {
        self.inner().holds_lease(id)
    }
    fn put_fenced(&self, lease: &str, namespace: &str, key: &str, v: serde_json::Value) -> Ack {
        self.inner().put_fenced(lease, namespace, key, v)
    }
    fn replica(&self) -> Option<ReplicaIdentity> {
        self.inner().replica()
    }
    fn replica_view(&self) -> Result<ReplicaView, StoreError> {
        self.inner().replica_view()
    }
    fn release_escrow(&self, escrow_id: &str) -> Result<(), StoreError> {
        self.inner().release_escrow(escrow_id)
    }
    fn ownership_round_done(&self) {
        self.inner().ownership_round_done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_logged_without_their_password() {
        assert_eq!(
            redact_url("postgres://gw:s3cret@db:5432/gateway"),
            "postgres://gw:***@db:5432/gateway"
        );
        assert_eq!(redact_url("postgres://db/gw"), "postgres://db/gw");
        assert_eq!(redact_url("host=db"), "host=db");
    }
}
