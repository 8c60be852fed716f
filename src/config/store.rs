//! `[store]`: where the gateway keeps its state. Empty `url` (the default): the SQLite file
//! `gateway.db` in `data_dir`, for one process. `url = "postgres://…"` (or `DEVSHARD_DATABASE_URL`):
//! a PostgreSQL database that several replicas share, each escrow appended to by the one replica
//! that holds its fenced lease (README "PostgreSQL store").
//!
//! ```toml
//! [store]
//! url = "postgres://gateway@db:5432/gateway"  # empty = SQLite in data_dir
//! replica_id = ""                             # empty = $HOSTNAME (the pod name), else "gateway"
//! ```
//!
//! Environment: `DEVSHARD_DATABASE_URL`, `DEVSHARD_REPLICA_ID`, `DEVSHARD_LEASE_TTL_MS`,
//! `DEVSHARD_ADVERTISE_URL`; the
//! replica id falls back to `HOSTNAME` (`super::env`).
//!
//! ```toml
//! lease_ttl_ms = 10000                        # an escrow's lease; renewed every third of it
//! advertise_url = "http://10.0.0.7:8080"      # where other replicas forward to (DEVSHARD_ADVERTISE_URL)
//! sslmode = ""                                # TLS: libpq's sslmode, when the URL has none (DEVSHARD_DATABASE_SSLMODE)
//! sslrootcert = ""                            # the server's CA (PEM) or `system` (DEVSHARD_DATABASE_SSLROOTCERT)
//! ```
//!
//! TLS (`crate::store::postgres::target`): `?sslmode=` and `?sslrootcert=` in the URL, or the two
//! keys; the default is `prefer`, and `verify-full` once a root certificate is given.

use std::{path::Path, time::Duration};

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::store::{
    postgres::{PgTarget, ReplicaConfig, TlsKeys},
    StoreTarget,
};

/// Default escrow lease TTL.
pub const DEFAULT_LEASE_TTL_MS: u64 = 10_000;

/// `[store]` as read from the file.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawStore {
    pub url: String,
    pub replica_id: String,
    pub lease_ttl_ms: u64,
    pub advertise_url: String,
    /// libpq's `sslmode` when the URL names none (empty: not set).
    pub sslmode: String,
    /// The server's CA certificates (PEM) or `system` when the URL names none (empty: not set).
    pub sslrootcert: String,
}

impl std::fmt::Debug for RawStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawStore")
            .field("url", &crate::store::redact_url(&self.url))
            .field("replica_id", &self.replica_id)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("advertise_url", &self.advertise_url)
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .finish()
    }
}

impl Default for RawStore {
    fn default() -> Self {
        RawStore {
            url: String::new(),
            replica_id: String::new(),
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            advertise_url: String::new(),
            sslmode: String::new(),
            sslrootcert: String::new(),
        }
    }
}

/// The store target: SQLite at `sqlite_path` unless a PostgreSQL URL is set.
pub fn store_target(raw: &RawStore, sqlite_path: &Path) -> Result<StoreTarget, ConfigError> {
    let url = raw.url.trim();
    if url.is_empty() {
        return Ok(StoreTarget::Sqlite(sqlite_path.to_path_buf()));
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError::Invalid {
            key: "store.url",
            message: "must be empty (SQLite) or a postgres:// URL".into(),
        });
    }
    if raw.lease_ttl_ms < 300 {
        return Err(ConfigError::Invalid {
            key: "store.lease_ttl_ms",
            message: "must be at least 300 (renewed every third of it)".into(),
        });
    }
    let advertise = raw.advertise_url.trim();
    if !(advertise.is_empty()
        || advertise.starts_with("http://")
        || advertise.starts_with("https://"))
    {
        return Err(ConfigError::Invalid {
            key: "store.advertise_url",
            message: "must be empty or an http(s):// URL the other replicas reach".into(),
        });
    }
    let keys = TlsKeys {
        sslmode: &raw.sslmode,
        sslrootcert: &raw.sslrootcert,
    };
    let target = PgTarget::parse(url, keys).map_err(|e| ConfigError::Invalid {
        key: e.key(),
        message: e.to_string(),
    })?;
    let id = match raw.replica_id.trim() {
        "" => "gateway",
        id => id,
    };
    Ok(StoreTarget::Postgres {
        url: url.to_string(),
        target: Box::new(target),
        replica: ReplicaConfig {
            id: id.to_string(),
            lease_ttl: Duration::from_millis(raw.lease_ttl_ms),
            advertise_url: advertise.trim_end_matches('/').to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::SslMode;

    #[test]
    fn sqlite_by_default_postgres_by_url() {
        let path = Path::new("data/gateway.db");
        let raw = RawStore::default();
        assert!(matches!(
            store_target(&raw, path).unwrap(),
            StoreTarget::Sqlite(p) if p == path
        ));
        let pg = RawStore {
            url: "postgres://gw:pw@db/gw".into(),
            ..RawStore::default()
        };
        let StoreTarget::Postgres { url, replica, .. } = store_target(&pg, path).unwrap() else {
            panic!("a postgres URL selects PostgreSQL");
        };
        assert_eq!(url, "postgres://gw:pw@db/gw");
        assert_eq!(replica.id, "gateway");
        assert_eq!(replica.lease_ttl, Duration::from_secs(10));
        assert!(
            !format!("{pg:?}").contains("pw@"),
            "the password is never printed"
        );
        let named = RawStore {
            replica_id: "r2".into(),
            ..pg.clone()
        };
        let StoreTarget::Postgres { replica, .. } = store_target(&named, path).unwrap() else {
            panic!("postgres");
        };
        assert_eq!(replica.id, "r2");
        let bad = RawStore {
            url: "mysql://x".into(),
            ..RawStore::default()
        };
        assert!(store_target(&bad, path).is_err());
        let short = RawStore {
            lease_ttl_ms: 10,
            ..pg.clone()
        };
        assert!(store_target(&short, path).is_err());
    }

    #[test]
    fn tls_settings_come_from_the_url_or_the_keys_never_both_differently() {
        let path = Path::new("data/gateway.db");
        let target = |raw: &RawStore| match store_target(raw, path) {
            Ok(StoreTarget::Postgres { target, .. }) => Ok(target.mode()),
            Ok(StoreTarget::Sqlite(_)) => panic!("postgres"),
            Err(ConfigError::Invalid { key, .. }) => Err(key),
            Err(e) => panic!("{e}"),
        };
        let pg = RawStore {
            url: "postgres://gw@db/gw?sslmode=require".into(),
            ..RawStore::default()
        };
        assert_eq!(target(&pg), Ok(SslMode::Require));
        let keyed = RawStore {
            url: "postgres://gw@db/gw".into(),
            sslmode: "verify-full".into(),
            sslrootcert: "system".into(),
            ..RawStore::default()
        };
        assert_eq!(target(&keyed), Ok(SslMode::VerifyFull));
        let both = RawStore {
            sslmode: "disable".into(),
            ..pg.clone()
        };
        assert_eq!(target(&both), Err("store.sslmode"));
        let missing = RawStore {
            sslrootcert: "/nonexistent/ca.crt".into(),
            ..pg
        };
        assert_eq!(target(&missing), Err("store.sslrootcert"));
    }
}
