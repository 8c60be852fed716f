//! A store under test on either backend: a SQLite file in a temporary directory, or a fresh
//! schema on the test PostgreSQL server (`pgdb.rs`).

use std::time::Duration;

use devshard_actors::store::Store;
use devshard_gateway::store::{
    postgres::{PgStore, ReplicaConfig},
    GatewayStore, SqliteStore,
};

use crate::{pgdb::TestDb, support::TempDir};

/// Where a test's store lives.
pub enum Db {
    Sqlite(TempDir),
    Postgres(Box<TestDb>),
}

/// The replica the contract tests write as.
pub const REPLICA: &str = "replica-a";

impl Db {
    pub fn sqlite(name: &str) -> Db {
        Db::Sqlite(TempDir::new(name))
    }

    pub fn postgres(name: &str) -> Db {
        Db::Postgres(Box::new(TestDb::new(name)))
    }

    /// Opens the store (again) as [`REPLICA`] and claims `escrows` (no-op on SQLite).
    pub fn open_for(&self, escrows: &[&str]) -> GatewayStore {
        let store = self.open_as(REPLICA, Duration::from_secs(10));
        for e in escrows {
            store.claim_escrow(e).unwrap();
        }
        store
    }

    /// Opens the store as `replica` with leases of `ttl`.
    pub fn open_as(&self, replica: &str, ttl: Duration) -> GatewayStore {
        match self {
            Db::Sqlite(dir) => GatewayStore::Sqlite(SqliteStore::open(dir.db()).unwrap()),
            Db::Postgres(db) => GatewayStore::Postgres(pg_store(db, replica, ttl)),
        }
    }
}

/// A PostgreSQL store on `db` as `replica`.
pub fn pg_store(db: &TestDb, replica: &str, ttl: Duration) -> PgStore {
    let replica = ReplicaConfig {
        id: replica.into(),
        lease_ttl: ttl,
        advertise_url: String::new(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    PgStore::open_config(db.config(), replica, log).unwrap()
}
