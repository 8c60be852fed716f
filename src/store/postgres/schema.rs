//! The PostgreSQL schema and its versioned migrations.
//!
//! The version lives in `schema_version (version)`, one row. `MIGRATIONS[i]` upgrades a database
//! from version `i` to `i + 1`. All pending steps and the version bump run in one transaction
//! that first locks `schema_version`, so replicas starting together migrate once and a failed
//! step leaves the previous version intact. A database written by a newer binary is refused.
//! Tables and columns mirror the SQLite store's (`crate::store::schema`), so `migrate` copies
//! rows one to one; BLOBs are `bytea`, JSON stays text (byte for byte what was written).

use devshard_actors::store::StoreError;
use tokio_postgres::Client;

use super::pg_err;

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: everything the SQLite store holds at its version 4, and the escrow leases.
    "CREATE TABLE diffs (
         escrow_id       TEXT   NOT NULL,
         nonce           BIGINT NOT NULL,
         txs             BYTEA  NOT NULL,
         user_sig        BYTEA  NOT NULL,
         post_state_root BYTEA  NOT NULL,
         warm_delta      TEXT,
         PRIMARY KEY (escrow_id, nonce)
     );
     CREATE TABLE records (
         namespace  TEXT   NOT NULL,
         key        TEXT   NOT NULL,
         value      TEXT   NOT NULL,
         updated_ms BIGINT NOT NULL,
         PRIMARY KEY (namespace, key)
     );
     CREATE TABLE ledger_requests (
         request_id    TEXT    NOT NULL PRIMARY KEY,
         started_ms    BIGINT  NOT NULL,
         ended_ms      BIGINT  NOT NULL,
         model         TEXT    NOT NULL,
         escrow_id     TEXT    NOT NULL,
         api_key_id    TEXT    NOT NULL,
         stream        BIGINT  NOT NULL,
         outcome       TEXT    NOT NULL,
         status        BIGINT  NOT NULL,
         winner_nonce  BIGINT,
         input_tokens  BIGINT,
         output_tokens BIGINT,
         reserved_cost BIGINT,
         actual_cost   BIGINT,
         total_cost    BIGINT,
         settled_ms    BIGINT
     );
     CREATE INDEX ledger_requests_ended ON ledger_requests (ended_ms);
     CREATE TABLE ledger_attempts (
         request_id    TEXT   NOT NULL,
         nonce         BIGINT NOT NULL,
         escrow_id     TEXT   NOT NULL,
         host          TEXT   NOT NULL,
         role          TEXT   NOT NULL,
         result        TEXT   NOT NULL,
         inference     TEXT,
         input_tokens  BIGINT,
         output_tokens BIGINT,
         reserved_cost BIGINT,
         actual_cost   BIGINT,
         fee           BIGINT,
         cost          BIGINT,
         settled_ms    BIGINT,
         PRIMARY KEY (request_id, nonce)
     );
     CREATE INDEX ledger_attempts_unsettled ON ledger_attempts (escrow_id, nonce)
         WHERE settled_ms IS NULL;
     CREATE INDEX ledger_attempts_nonce ON ledger_attempts (escrow_id, nonce);
     CREATE TABLE escrow_leases (
         escrow_id  TEXT        NOT NULL PRIMARY KEY,
         owner      TEXT        NOT NULL,
         epoch      BIGINT      NOT NULL,
         expires_at TIMESTAMPTZ NOT NULL
     );",
    // 1 -> 2: the live replicas (heartbeat, timed by the database's clock) and the address other
    // replicas forward requests to.
    "CREATE TABLE replicas (
         replica_id TEXT        NOT NULL PRIMARY KEY,
         address    TEXT        NOT NULL,
         started_at TIMESTAMPTZ NOT NULL,
         expires_at TIMESTAMPTZ NOT NULL
     );",
    // 2 -> 3: each escrow's live budget as its lease owner published it (`budgets.rs`), read
    // by the rotation's leader for the escrows it does not run.
    "CREATE TABLE escrow_budgets (
         escrow_id    TEXT        NOT NULL PRIMARY KEY,
         owner        TEXT        NOT NULL,
         epoch        BIGINT      NOT NULL,
         nonce        BIGINT      NOT NULL,
         spendable    BIGINT      NOT NULL,
         published_at TIMESTAMPTZ NOT NULL
     );",
];

/// Why a schema cannot be used.
pub fn check_version(found: i32) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::Io(format!(
            "the PostgreSQL schema is at version {found}, newer than this binary supports \
             ({SCHEMA_VERSION}): run a newer devshard-gateway"
        )));
    }
    if found < 0 {
        return Err(StoreError::Corrupt(format!(
            "negative schema version {found}"
        )));
    }
    Ok(())
}

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction; returns the version found.
pub async fn migrate(client: &mut Client) -> Result<i32, StoreError> {
    let tx = client.transaction().await.map_err(pg_err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
         LOCK TABLE schema_version IN EXCLUSIVE MODE;",
    )
    .await
    .map_err(pg_err)?;
    let found: Option<i32> = tx
        .query_opt("SELECT version FROM schema_version", &[])
        .await
        .map_err(pg_err)?
        .map(|r| r.get(0));
    let found = found.unwrap_or(0);
    check_version(found)?;
    for sql in MIGRATIONS.iter().skip(usize::try_from(found).unwrap_or(0)) {
        tx.batch_execute(sql).await.map_err(pg_err)?;
    }
    tx.execute("DELETE FROM schema_version", &[])
        .await
        .map_err(pg_err)?;
    tx.execute(
        "INSERT INTO schema_version (version) VALUES ($1)",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(pg_err)?;
    tx.commit().await.map_err(pg_err)?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_schemas_are_refused_with_what_to_do() {
        assert!(check_version(0).is_ok());
        assert!(check_version(SCHEMA_VERSION).is_ok());
        let Err(StoreError::Io(msg)) = check_version(SCHEMA_VERSION + 1) else {
            panic!("a newer schema must be refused");
        };
        assert!(msg.contains("newer than this binary"), "{msg}");
        assert!(matches!(check_version(-1), Err(StoreError::Corrupt(_))));
    }
}
