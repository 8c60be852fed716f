//! Opening connections and creating/migrating the schema.
//!
//! The schema version lives in `PRAGMA user_version`. `MIGRATIONS[i]` upgrades a database from
//! version `i` to `i + 1`; each step runs in its own transaction together with the version bump,
//! so a crash mid-migration leaves the previous version intact. A database written by a newer
//! binary (version above [`SCHEMA_VERSION`]) is refused rather than guessed at.

use std::{path::Path, time::Duration};

use devshard_actors::store::StoreError;
use rusqlite::{Connection, OpenFlags};

use super::codec::sql_err;

/// The schema version this binary writes.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a connection waits for a lock held by another connection before failing.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the diff log and the record store.
    "CREATE TABLE diffs (
         escrow_id       TEXT    NOT NULL,
         nonce           INTEGER NOT NULL,
         txs             BLOB    NOT NULL,
         user_sig        BLOB    NOT NULL,
         post_state_root BLOB    NOT NULL,
         PRIMARY KEY (escrow_id, nonce)
     ) WITHOUT ROWID;
     CREATE TABLE records (
         namespace  TEXT    NOT NULL,
         key        TEXT    NOT NULL,
         value      TEXT    NOT NULL, -- JSON
         updated_ms INTEGER NOT NULL,
         PRIMARY KEY (namespace, key)
     );",
    // 1 -> 2: the cost ledger (`ledger.rs`): one row per request, one per attempt (nonce).
    "CREATE TABLE ledger_requests (
         request_id    TEXT    NOT NULL PRIMARY KEY,
         started_ms    INTEGER NOT NULL,
         ended_ms      INTEGER NOT NULL,
         model         TEXT    NOT NULL,
         escrow_id     TEXT    NOT NULL,
         api_key_id    TEXT    NOT NULL, -- `anonymous`, `admin` or `key_<sha256 prefix>`
         stream        INTEGER NOT NULL,
         outcome       TEXT    NOT NULL,
         status        INTEGER NOT NULL,
         winner_nonce  INTEGER,
         input_tokens  INTEGER,
         output_tokens INTEGER,
         reserved_cost INTEGER,
         actual_cost   INTEGER,
         total_cost    INTEGER, -- every attempt's cost to the escrow, losers included
         settled_ms    INTEGER
     );
     CREATE INDEX ledger_requests_ended ON ledger_requests (ended_ms);
     CREATE TABLE ledger_attempts (
         request_id    TEXT    NOT NULL,
         nonce         INTEGER NOT NULL,
         escrow_id     TEXT    NOT NULL,
         host          TEXT    NOT NULL,
         role          TEXT    NOT NULL,
         result        TEXT    NOT NULL,
         inference     TEXT, -- the nonce's inference status once settled (`none`: no inference)
         input_tokens  INTEGER,
         output_tokens INTEGER,
         reserved_cost INTEGER,
         actual_cost   INTEGER,
         fee           INTEGER,
         cost          INTEGER, -- actual_cost + fee
         settled_ms    INTEGER,
         PRIMARY KEY (request_id, nonce)
     ) WITHOUT ROWID;
     CREATE INDEX ledger_attempts_unsettled ON ledger_attempts (escrow_id, nonce)
         WHERE settled_ms IS NULL;",
    // 2 -> 3: the warm keys a diff bound (JSON `[{slot, address}]`, NULL when none).
    "ALTER TABLE diffs ADD COLUMN warm_delta TEXT;",
    // 3 -> 4: settling a nonce finds its attempts by (escrow, nonce) after their `settled_ms` is
    // set, which the partial index above no longer covers: without this index every settlement
    // scanned the whole attempts table (quadratic in the ledger's size; `ledger.rs` tests the plan).
    "CREATE INDEX ledger_attempts_nonce ON ledger_attempts (escrow_id, nonce);",
];

/// Opens (creating if needed) the read-write connection used by the writer thread: WAL journal,
/// `synchronous=FULL` (every commit fsyncs the WAL), busy timeout, schema at [`SCHEMA_VERSION`].
pub(crate) fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| StoreError::Io(format!("creating {}: {e}", parent.display())))?;
    }
    let mut conn = Connection::open(path).map_err(sql_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sql_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "cannot enable WAL journal (journal_mode={mode})"
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql_err)?;
    // Checkpoints run on their own thread (`checkpoint.rs`), never inside a group commit.
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(sql_err)?;
    // A log SQLite rewinds is cut back to the checkpointer's bound (`checkpoint.rs`).
    conn.pragma_update(
        None,
        "journal_size_limit",
        super::checkpoint::WAL_LIMIT_BYTES as i64,
    )
    .map_err(sql_err)?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// Opens a read-only connection to a database already prepared by [`open_writer`].
pub(crate) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(sql_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err)?;
    Ok(conn)
}

/// The schema version recorded in the database.
pub(crate) fn user_version(conn: &Connection) -> Result<i64, StoreError> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sql_err)
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found = user_version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::Io(format!(
            "database schema version {found} is newer than this binary supports ({SCHEMA_VERSION})"
        )));
    }
    if found < 0 {
        return Err(StoreError::Corrupt(format!(
            "negative schema version {found}"
        )));
    }
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction().map_err(sql_err)?;
        tx.execute_batch(sql).map_err(sql_err)?;
        tx.pragma_update(None, "user_version", from as i64 + 1)
            .map_err(sql_err)?;
        tx.commit().map_err(sql_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> std::path::PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        std::env::temp_dir()
            .join(format!(
                "devshard-schema-{name}-{}-{nanos}",
                std::process::id()
            ))
            .join("db.sqlite")
    }

    #[test]
    fn creates_schema_once_and_refuses_newer_versions() {
        let path = temp_path("versions");
        let conn = open_writer(&path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 = conn
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(sync, 2, "synchronous=FULL");
        let reader = open_reader(&path).unwrap();
        assert_eq!(user_version(&reader).unwrap(), SCHEMA_VERSION);
        assert!(
            reader.execute_batch("DELETE FROM records").is_err(),
            "reader is read-only"
        );
        drop(reader);
        drop(conn);
        // Reopening an up-to-date database runs no migration (CREATE TABLE would fail).
        let conn = open_writer(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        assert!(matches!(open_writer(&path), Err(StoreError::Io(_))));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
