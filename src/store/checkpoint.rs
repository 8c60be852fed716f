//! Background WAL checkpoints, and a bound on the WAL file.
//!
//! SQLite's default folds the WAL back into the database file from inside a `COMMIT` once the WAL
//! passes 1 000 pages, so every few seconds under load one group commit also copies megabytes and
//! fsyncs the database — and every diff waiting on that group waits with it. The writer
//! connection therefore runs with `wal_autocheckpoint=0`, and this thread (`store-checkpoint`,
//! its own connection) runs a `PASSIVE` checkpoint every [`CHECKPOINT_INTERVAL`]: it never blocks
//! the writer or the readers.
//!
//! A passive checkpoint copies frames but never restarts the log: under steady writes some frame
//! is always newer than the checkpoint, so SQLite never rewinds the WAL and the file grows with
//! every commit (272 MB beside a 23 MB database after 30 000 requests). So once the file passes
//! [`WAL_LIMIT_BYTES`] the thread runs one `TRUNCATE` checkpoint: it waits (busy timeout) for the
//! writer's current group, copies what is left — little, right after a passive one — and cuts the
//! file to zero; writers wait for those milliseconds and the next commit starts a fresh log. The
//! writer also sets `journal_size_limit` to the same bound, so a log SQLite rewinds by itself is
//! cut back too. Durability is unchanged (a commit is durable once the WAL is fsynced; a
//! checkpoint only moves durable pages); the writer still truncates the WAL on a clean shutdown.

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc::{sync_channel, RecvTimeoutError, SyncSender},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use devshard_actors::store::StoreError;
use rusqlite::Connection;
use slog::{info, warn, Logger};

use super::{codec::sql_err, schema::BUSY_TIMEOUT};

/// How often the WAL is folded into the database file.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// Past this size the WAL file is checkpointed with `TRUNCATE` (and SQLite's own
/// `journal_size_limit`): 64 MiB, a few seconds of writes at peak load.
pub const WAL_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// What the checkpointer has seen, for metrics (read at scrape time).
#[derive(Debug, Default)]
pub struct WalCounters {
    /// Size of the WAL file after the last checkpoint.
    pub wal_bytes: AtomicU64,
    /// `TRUNCATE` checkpoints that cut the file.
    pub truncations: AtomicU64,
}

/// What one checkpoint round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fold {
    /// A passive checkpoint; the file is under the limit.
    Passive { wal_bytes: u64 },
    /// The file had passed the limit and was cut to `after` bytes.
    Truncated { before: u64, after: u64 },
}

/// The running checkpoint thread; [`Checkpointer::stop`] ends it.
pub(crate) struct Checkpointer {
    stop: SyncSender<()>,
    handle: JoinHandle<()>,
}

impl Checkpointer {
    /// Opens a connection to the (already migrated) database at `path` and starts the thread.
    pub(crate) fn spawn(
        path: &Path,
        counters: Arc<WalCounters>,
        log: Logger,
    ) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(sql_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err)?;
        let wal = wal_path(path);
        let (stop, rx) = sync_channel::<()>(1);
        let handle = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || {
                // Until told to stop (or the store is gone): a checkpoint per interval. Best
                // effort: one that cannot finish now is retried next time.
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(CHECKPOINT_INTERVAL) {
                    match fold(&conn, &wal, WAL_LIMIT_BYTES) {
                        Ok(Fold::Passive { wal_bytes }) => {
                            counters.wal_bytes.store(wal_bytes, Ordering::Relaxed);
                        }
                        Ok(Fold::Truncated { before, after }) => {
                            counters.wal_bytes.store(after, Ordering::Relaxed);
                            counters.truncations.fetch_add(1, Ordering::Relaxed);
                            info!(log, "WAL past its limit, truncated"; "stage" => "store_wal_truncated",
                                "wal_bytes_before" => before, "wal_bytes_after" => after);
                        }
                        Err(e) => {
                            warn!(log, "WAL checkpoint failed, retried next second";
                                "stage" => "store_checkpoint_failed", "error" => %e);
                        }
                    }
                }
            })
            .map_err(|e| StoreError::Io(format!("spawning the store checkpointer: {e}")))?;
        Ok(Checkpointer { stop, handle })
    }

    /// Stops the thread and waits for it (a checkpoint in progress completes first).
    pub(crate) fn stop(self) {
        let _ = self.stop.try_send(());
        let _ = self.handle.join();
    }
}

/// The WAL file SQLite keeps beside the database at `db`.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// One round: a passive checkpoint, then a truncating one if the file at `wal` is past `limit`.
pub(crate) fn fold(conn: &Connection, wal: &Path, limit: u64) -> rusqlite::Result<Fold> {
    checkpoint(conn, "PASSIVE")?;
    let before = file_len(wal);
    if before <= limit {
        return Ok(Fold::Passive { wal_bytes: before });
    }
    checkpoint(conn, "TRUNCATE")?;
    Ok(Fold::Truncated {
        before,
        after: file_len(wal),
    })
}

/// One checkpoint of `mode`: returns (frames in the WAL, frames now in the database file).
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(i64, i64)> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode});"), [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_connection_does_not_checkpoint_by_itself() {
        let dir = std::env::temp_dir().join(format!("ckpt-test-{}", std::process::id()));
        let path = dir.join("t.db");
        let conn = super::super::schema::open_writer(&path).unwrap();
        let auto: i64 = conn
            .query_row("PRAGMA wal_autocheckpoint;", [], |r| r.get(0))
            .unwrap();
        assert_eq!(auto, 0, "commits must never run a checkpoint inline");
        fill(&conn, 1_500);
        // The checkpointer's connection folds every frame into the database file.
        let other = Connection::open(&path).unwrap();
        let (log, done) = checkpoint(&other, "PASSIVE").unwrap();
        assert!(
            log > 1_000,
            "the WAL grew past SQLite's default threshold: {log}"
        );
        assert_eq!(
            done, log,
            "a passive checkpoint with no reader copies every frame"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    fn fill(conn: &Connection, rows: usize) {
        conn.execute_batch("CREATE TABLE IF NOT EXISTS t(x BLOB); BEGIN;")
            .unwrap();
        for _ in 0..rows {
            conn.execute("INSERT INTO t VALUES (?1)", [vec![7u8; 4000]])
                .unwrap();
        }
        conn.execute_batch("COMMIT;").unwrap();
    }

    #[test]
    fn a_wal_past_its_limit_is_cut_to_nothing_and_one_under_it_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("ckpt-limit-{}", std::process::id()));
        let path = dir.join("t.db");
        let writer = super::super::schema::open_writer(&path).unwrap();
        let other = Connection::open(&path).unwrap();
        let wal = wal_path(&path);
        fill(&writer, 300);
        let size = file_len(&wal);
        assert!(size > 1_000_000, "300 rows of 4 kB are in the WAL: {size}");
        assert_eq!(
            fold(&other, &wal, 8 * 1024 * 1024).unwrap(),
            Fold::Passive { wal_bytes: size },
            "under the limit only a passive checkpoint runs and the file stays"
        );
        fill(&writer, 300);
        let Fold::Truncated { before, after } = fold(&other, &wal, 1024 * 1024).unwrap() else {
            panic!("past the limit the WAL must be truncated");
        };
        assert!(before > 1024 * 1024, "{before}");
        assert_eq!(after, 0, "TRUNCATE leaves an empty WAL file");
        // Nothing was lost, and the writer goes on with a fresh log.
        fill(&writer, 1);
        let rows: i64 = other
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 601);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_writer_caps_a_rewound_wal_at_the_limit() {
        let dir = std::env::temp_dir().join(format!("ckpt-cap-{}", std::process::id()));
        let conn = super::super::schema::open_writer(&dir.join("t.db")).unwrap();
        let cap: i64 = conn
            .query_row("PRAGMA journal_size_limit;", [], |r| r.get(0))
            .unwrap();
        assert_eq!(cap as u64, WAL_LIMIT_BYTES);
        let _ = std::fs::remove_dir_all(dir);
    }
}
