//! The embedded SQLite implementation of [`devshard_actors::store::Store`].
//!
//! # Durability contract
//! One SQLite file in WAL mode with `synchronous=FULL`: a transaction is durable (the WAL is
//! fsynced) when `COMMIT` returns. Every write — `append_diff`, `delete_diffs`, `put`, `delete` —
//! returns an [`Ack`] that resolves only after the transaction containing it has committed, so
//! an actor that waits for the ack before showing a diff to a host obeys "durable before
//! visible". An ack that resolves with an error means the write did not happen. Writes are
//! applied in the order they were issued, across both kinds. After a crash (even `kill -9`
//! mid-commit) the file holds every acked write and, per escrow, a contiguous prefix of the
//! issued appends.
//!
//! # Group commit
//! All writes go through one bounded channel ([`QUEUE_CAPACITY`]) to one thread, `store-writer`,
//! which owns the only read-write connection. It takes the first queued write, drains whatever
//! else is already queued (up to [`MAX_GROUP`] ops), applies the group in one transaction,
//! commits once (one fsync for the group) and then resolves each op's ack with that op's own
//! result: an out-of-order append fails alone, the rest of its group commits. Under load the
//! fsync cost is thus shared by many writes; when idle a write commits alone, immediately.
//! When the queue is full, the issuing thread blocks until the writer has taken a group
//! (back-pressure; with the capacity used this means thousands of writes are waiting on disk).
//!
//! WAL checkpoints run on their own thread, never inside a group commit (`checkpoint.rs`).
//!
//! # Reads
//! Reads use a separate read-only connection behind a mutex; in WAL mode they never block the
//! writer nor wait for it. Each read is one statement, i.e. one consistent snapshot, and sees
//! every write whose ack has resolved (and possibly later ones that committed meanwhile).

mod backend;
mod checkpoint;
mod codec;
pub mod duty;
pub mod ledger;
mod ledger_batch;
mod ledger_sqlite;
mod ledger_writer;
pub mod metrics;
pub mod migrate;
mod ops;
pub mod postgres;
mod schema;
mod writer;

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{sync_channel, SyncSender},
        Arc, Mutex, MutexGuard,
    },
    thread::JoinHandle,
};

use devshard_actors::{
    protocol::{diff::Diff, warm::WarmBinding},
    store::{Ack, Store, StoreError, WarmDeltas},
};
use rusqlite::{params, Connection};

pub use self::backend::{redact_url, GatewayStore, StoreTarget};
use self::{
    checkpoint::{Checkpointer, WalCounters},
    codec::{decode_diff, decode_value, decode_warm_delta, encode_diff, sql_err, DiffRow},
    ops::{Counters, Msg, Op},
    writer::Writer,
};

/// Capacity of the writer's queue; issuing a write blocks while it is full.
pub const QUEUE_CAPACITY: usize = 4096;

/// Most writes applied (and fsynced) in one transaction.
pub const MAX_GROUP: usize = 512;

/// Group-commit counters, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Transactions committed by the writer.
    pub groups_committed: u64,
    /// Writes that took effect in committed transactions (failed ops and flushes excluded).
    pub ops_committed: u64,
    /// Writes (including ones that failed alone, excluding flushes) in the last committed group.
    pub last_group_size: u64,
    /// Size of the WAL file after the last checkpoint (`checkpoint.rs` bounds it).
    pub wal_bytes: u64,
    /// Checkpoints that truncated a WAL past its limit.
    pub wal_truncations: u64,
}

/// The SQLite-backed [`Store`].
pub struct SqliteStore {
    path: PathBuf,
    sender: SyncSender<Msg>,
    writer: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Mutex<Option<Checkpointer>>,
    closed: AtomicBool,
    reader: Mutex<Connection>,
    counters: Arc<Counters>,
    wal: Arc<WalCounters>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .field("stats", &self.stats())
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating the file and its parent directories if needed) the store at `path`,
    /// migrates the schema and starts the writer thread.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_logged(path, slog::Logger::root(slog::Discard, slog::o!()))
    }

    /// [`SqliteStore::open`], with the checkpointer logging to `log`.
    pub fn open_logged(
        path: impl AsRef<Path>,
        log: slog::Logger,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = schema::open_writer(&path)?;
        let reader = schema::open_reader(&path)?;
        let counters = Arc::new(Counters::default());
        let (sender, rx) = sync_channel(QUEUE_CAPACITY);
        let writer = Writer::new(conn, Arc::clone(&counters));
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Io(format!("spawning the store writer: {e}")))?;
        let wal = Arc::new(WalCounters::default());
        let checkpointer = Checkpointer::spawn(&path, Arc::clone(&wal), log)?;
        Ok(SqliteStore {
            path,
            sender,
            writer: Mutex::new(Some(handle)),
            checkpointer: Mutex::new(Some(checkpointer)),
            closed: AtomicBool::new(false),
            reader: Mutex::new(reader),
            counters,
            wal,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A snapshot of the group-commit counters.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            groups_committed: self.counters.groups.load(Ordering::Relaxed),
            ops_committed: self.counters.ops.load(Ordering::Relaxed),
            last_group_size: self.counters.last_group.load(Ordering::Relaxed),
            wal_bytes: self.wal.wal_bytes.load(Ordering::Relaxed),
            wal_truncations: self.wal.truncations.load(Ordering::Relaxed),
        }
    }

    /// Stops the writer after it has committed every write issued before; later writes resolve
    /// with [`StoreError::Closed`]. Blocks until the writer thread has exited. Idempotent; also
    /// run on drop. Reads keep working.
    pub fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(checkpointer) = self
            .checkpointer
            .lock()
            .map_err(|_| StoreError::Io("store checkpointer mutex poisoned".into()))?
            .take()
        {
            checkpointer.stop();
        }
        let handle = self
            .writer
            .lock()
            .map_err(|_| StoreError::Io("store writer handle mutex poisoned".into()))?
            .take();
        let Some(handle) = handle else { return Ok(()) };
        // Fails only if the writer is already gone, which is what we want anyway.
        let _ = self.sender.send(Msg::Shutdown);
        handle
            .join()
            .map_err(|_| StoreError::Io("the store writer thread panicked".into()))
    }

    fn submit(&self, op: Result<Op, StoreError>) -> Ack {
        let op = match op {
            Ok(op) => op,
            Err(e) => return Ack::ready(Err(e)),
        };
        if self.closed.load(Ordering::SeqCst) {
            return Ack::ready(Err(StoreError::Closed));
        }
        let (tx, ack) = Ack::channel();
        match self.sender.send(Msg::Write(op, tx)) {
            Ok(()) => ack,
            Err(_) => Ack::ready(Err(StoreError::Closed)),
        }
    }

    fn read(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.reader
            .lock()
            .map_err(|_| StoreError::Io("store reader mutex poisoned".into()))
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl Store for SqliteStore {
    fn append_diff_with_warm(
        &self,
        escrow_id: &str,
        diff: &Diff,
        warm_delta: &[WarmBinding],
    ) -> Ack {
        self.submit(encode_diff(diff, warm_delta).map(|row| Op::AppendDiff {
            escrow: escrow_id.to_string(),
            epoch: 0,
            row,
        }))
    }

    fn load_diffs(&self, escrow_id: &str) -> Result<Vec<Diff>, StoreError> {
        self.load_diffs_from(escrow_id, 0)
    }

    fn load_diffs_from(&self, escrow_id: &str, from: u64) -> Result<Vec<Diff>, StoreError> {
        self.load_diffs_range(escrow_id, from, u64::MAX)
    }

    fn load_diffs_range(
        &self,
        escrow_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<Diff>, StoreError> {
        let Ok(from) = i64::try_from(from) else {
            return Ok(Vec::new());
        };
        let to = i64::try_from(to).unwrap_or(i64::MAX);
        let conn = self.read()?;
        let mut st = conn
            .prepare_cached(
                "SELECT nonce, txs, user_sig, post_state_root FROM diffs \
                 WHERE escrow_id = ?1 AND nonce >= ?2 AND nonce <= ?3 ORDER BY nonce",
            )
            .map_err(sql_err)?;
        let rows = st
            .query_map(params![escrow_id, from, to], |r| {
                Ok(DiffRow {
                    nonce: r.get(0)?,
                    txs: r.get(1)?,
                    user_sig: r.get(2)?,
                    post_state_root: r.get(3)?,
                    warm_delta: None,
                })
            })
            .map_err(sql_err)?;
        rows.map(|row| decode_diff(escrow_id, row.map_err(sql_err)?))
            .collect()
    }

    fn load_warm_deltas(&self, escrow_id: &str) -> Result<WarmDeltas, StoreError> {
        let conn = self.read()?;
        let mut st = conn
            .prepare_cached(
                "SELECT nonce, warm_delta FROM diffs \
                 WHERE escrow_id = ?1 AND warm_delta IS NOT NULL ORDER BY nonce",
            )
            .map_err(sql_err)?;
        let rows = st
            .query_map(params![escrow_id], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(sql_err)?;
        rows.map(|row| {
            let (nonce, text) = row.map_err(sql_err)?;
            let delta = decode_warm_delta(escrow_id, nonce, &text)?;
            let nonce = u64::try_from(nonce)
                .map_err(|_| StoreError::Corrupt(format!("escrow {escrow_id}: nonce {nonce}")))?;
            Ok((nonce, delta))
        })
        .collect()
    }

    fn delete_diffs(&self, escrow_id: &str) -> Ack {
        self.submit(Ok(Op::delete_diffs(escrow_id)))
    }

    fn put(&self, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        self.submit(Op::put(namespace, key, &value))
    }

    fn delete(&self, namespace: &str, key: &str) -> Ack {
        self.submit(Ok(Op::delete(namespace, key)))
    }

    fn get(&self, namespace: &str, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let conn = self.read()?;
        let mut st = conn
            .prepare_cached("SELECT value FROM records WHERE namespace = ?1 AND key = ?2")
            .map_err(sql_err)?;
        let mut rows = st.query(params![namespace, key]).map_err(sql_err)?;
        match rows.next().map_err(sql_err)? {
            None => Ok(None),
            Some(row) => {
                let text: String = row.get(0).map_err(sql_err)?;
                decode_value(namespace, key, &text).map(Some)
            }
        }
    }

    fn list(&self, namespace: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let conn = self.read()?;
        let mut st = conn
            .prepare_cached("SELECT key, value FROM records WHERE namespace = ?1 ORDER BY key")
            .map_err(sql_err)?;
        let rows = st
            .query_map(params![namespace], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(sql_err)?;
        rows.map(|row| {
            let (key, text) = row.map_err(sql_err)?;
            let value = decode_value(namespace, &key, &text)?;
            Ok((key, value))
        })
        .collect()
    }

    fn flush(&self) -> Ack {
        self.submit(Ok(Op::Flush))
    }
}
