//! Background WAL checkpoints.
//!
//! SQLite's default folds the WAL back into the database file from inside a `COMMIT` once the WAL
//! passes 1 000 pages, so every few seconds under load one group commit also copies megabytes and
//! fsyncs the database — and every diff waiting on that group waits with it. The writer
//! connection therefore runs with `wal_autocheckpoint=0`, and this thread (`store-checkpoint`,
//! its own connection) runs a `PASSIVE` checkpoint every [`CHECKPOINT_INTERVAL`]: it never blocks
//! the writer or the readers, and the WAL stays small. Durability is unchanged (a commit is durable
//! once the WAL is fsynced); the writer still truncates the WAL on a clean shutdown.

use std::{
    path::Path,
    sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender},
    thread::JoinHandle,
    time::Duration,
};

use devshard_actors::store::StoreError;
use rusqlite::Connection;

use super::{codec::sql_err, schema::BUSY_TIMEOUT};

/// How often the WAL is folded into the database file.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// The running checkpoint thread; [`Checkpointer::stop`] ends it.
pub(crate) struct Checkpointer {
    stop: SyncSender<()>,
    handle: JoinHandle<()>,
}

impl Checkpointer {
    /// Opens a connection to the (already migrated) database at `path` and starts the thread.
    pub(crate) fn spawn(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open(path).map_err(sql_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_err)?;
        let (stop, rx) = sync_channel::<()>(1);
        let handle = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || {
                // Until told to stop (or the store is gone): a checkpoint per interval. Best
                // effort: one that cannot finish now is retried next time.
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(CHECKPOINT_INTERVAL) {
                    let _ = checkpoint(&conn);
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

/// One `PASSIVE` checkpoint: returns (frames in the WAL, frames now in the database file).
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE);", [], |r| {
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
        conn.execute_batch("CREATE TABLE IF NOT EXISTS t(x BLOB);")
            .unwrap();
        for _ in 0..1_500 {
            conn.execute("INSERT INTO t VALUES (?1)", [vec![7u8; 4000]])
                .unwrap();
        }
        // The checkpointer's connection folds every frame into the database file.
        let other = Connection::open(&path).unwrap();
        let (log, done) = checkpoint(&other).unwrap();
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
}
