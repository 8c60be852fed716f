//! The cost ledger's tables: `ledger_requests`, one row per request that reached an escrow, and
//! `ledger_attempts`, one row per nonce its race used (loser attempts and unused grants
//! included). They live in the gateway's store: `gateway.db` (SQLite schema version 2) or the
//! PostgreSQL database the replicas share, so any replica answers for any request.
//!
//! Writes go through one thread per process, `ledger-writer`, with its own connection. It drains
//! whatever is queued (up to [`MAX_BATCH`] rows) into one transaction (`super::ledger_batch`, the
//! same for both databases). SQLite (`super::ledger_writer`, reads in `super::ledger_sqlite`): the writer's
//! connection runs `synchronous=NORMAL` (the ledger is an account of what happened, not protocol
//! state, so it does not take the diff log's fsync per commit; WAL keeps it consistent and a clean
//! shutdown flushes it); reads open their own read-only connection. PostgreSQL
//! (`super::postgres::ledger`): the writer's and the readers' connections run on the writer
//! thread's runtime. The SQL is written once ([`sql`]), with `?N` placeholders that PostgreSQL
//! reads as `$N`.
//!
//! A request row is inserted when the request ends (outcome known, race reported); its cost
//! columns stay `NULL` until every attempt is settled ([`LedgerStore::settle`]), which the
//! settlement tail (`crate::state::ledger`) does from the escrow's durable diff log.

use std::{
    path::{Path, PathBuf},
    sync::{mpsc::channel, Mutex},
    thread::JoinHandle,
};

use devshard_actors::store::StoreError;
use prometheus::{IntCounterVec, Registry};
use serde::Serialize;
use slog::Logger;
use tokio::sync::mpsc::UnboundedSender;

use super::postgres::ledger::PgLedgerReads;

/// Most queued writes applied in one transaction.
pub const MAX_BATCH: usize = 256;

/// One attempt (nonce) of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptRow {
    pub nonce: u64,
    pub host: String,
    /// `primary`, `retry`, `hedge`, `pair`.
    pub role: String,
    /// `won`, `failed`, `cancelled`, `not_started`, …
    pub result: String,
    /// The nonce's inference status once settled (`finished`, `timed_out`, …; `none`: the nonce
    /// carried no inference).
    pub inference: Option<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub reserved_cost: Option<u64>,
    pub actual_cost: Option<u64>,
    /// The per-nonce fee.
    pub fee: Option<u64>,
    /// Its cost to the escrow: `actual_cost + fee`.
    pub cost: Option<u64>,
    pub settled_ms: Option<i64>,
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestRow {
    pub request_id: String,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub model: String,
    pub escrow_id: String,
    /// `anonymous`, `admin` or `key_<hex>` (a hash of the API key, never the key).
    pub api_key_id: String,
    pub stream: bool,
    /// `completed` or the failure code.
    pub outcome: String,
    pub status: u16,
    pub winner_nonce: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub reserved_cost: Option<u64>,
    pub actual_cost: Option<u64>,
    /// Every attempt's cost to the escrow, losers included.
    pub total_cost: Option<u64>,
    /// When the last attempt settled (`None` while some is unsettled).
    pub settled_ms: Option<i64>,
    pub attempts: Vec<AttemptRow>,
}

/// How one nonce settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub escrow_id: String,
    pub nonce: u64,
    pub inference: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reserved_cost: u64,
    pub actual_cost: u64,
    pub fee: u64,
    pub settled_ms: i64,
}

use super::ledger_batch::settle_ops;
pub(super) use super::ledger_batch::{batch_counter, count_batch, next_batch, Op};

/// The ledger's SQL, for both databases: `?N` placeholders (PostgreSQL: `$N`, [`sql::pg`]).
pub(super) mod sql {
    pub const INSERT_REQUEST: &str = "INSERT INTO ledger_requests (request_id, started_ms,
             ended_ms, model, escrow_id, api_key_id, stream, outcome, status, winner_nonce,
             total_cost, settled_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT DO NOTHING";
    pub const INSERT_ATTEMPT: &str = "INSERT INTO ledger_attempts (request_id, nonce, escrow_id,
             host, role, result)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING";
    pub const SETTLE_ATTEMPT: &str = "UPDATE ledger_attempts SET inference = ?3,
             input_tokens = ?4, output_tokens = ?5, reserved_cost = ?6, actual_cost = ?7,
             fee = ?8, cost = ?9, settled_ms = ?10
         WHERE escrow_id = ?1 AND nonce = ?2 AND settled_ms IS NULL";
    /// Completes the request rows whose last attempt `(escrow ?1, nonce ?2)` just settled.
    pub const COMPLETE_REQUESTS: &str = "UPDATE ledger_requests SET
             input_tokens = (SELECT a.input_tokens FROM ledger_attempts a
                 WHERE a.request_id = ledger_requests.request_id
                   AND a.nonce = ledger_requests.winner_nonce),
             output_tokens = (SELECT a.output_tokens FROM ledger_attempts a
                 WHERE a.request_id = ledger_requests.request_id
                   AND a.nonce = ledger_requests.winner_nonce),
             reserved_cost = (SELECT a.reserved_cost FROM ledger_attempts a
                 WHERE a.request_id = ledger_requests.request_id
                   AND a.nonce = ledger_requests.winner_nonce),
             actual_cost = (SELECT a.actual_cost FROM ledger_attempts a
                 WHERE a.request_id = ledger_requests.request_id
                   AND a.nonce = ledger_requests.winner_nonce),
             total_cost = (SELECT SUM(a.cost) FROM ledger_attempts a
                 WHERE a.request_id = ledger_requests.request_id),
             settled_ms = ?3
         WHERE settled_ms IS NULL
           AND request_id IN (SELECT request_id FROM ledger_attempts
                              WHERE escrow_id = ?1 AND nonce = ?2)
           AND NOT EXISTS (SELECT 1 FROM ledger_attempts a
                           WHERE a.request_id = ledger_requests.request_id
                             AND a.settled_ms IS NULL)";
    pub const PRUNE_ATTEMPTS: &str = "DELETE FROM ledger_attempts WHERE request_id IN
             (SELECT request_id FROM ledger_requests WHERE ended_ms < ?1)";
    pub const PRUNE_REQUESTS: &str = "DELETE FROM ledger_requests WHERE ended_ms < ?1";
    const REQUEST_COLUMNS: &str = "request_id, started_ms, ended_ms, model, escrow_id,
        api_key_id, stream, outcome, status, winner_nonce, input_tokens, output_tokens,
        reserved_cost, actual_cost, total_cost, settled_ms";
    pub fn get_request() -> String {
        format!("SELECT {REQUEST_COLUMNS} FROM ledger_requests WHERE request_id = ?1")
    }
    pub fn page() -> String {
        format!(
            "SELECT {REQUEST_COLUMNS} FROM ledger_requests
             WHERE ended_ms >= ?1 AND ended_ms < ?2 AND (ended_ms, request_id) > (?3, ?4)
             ORDER BY ended_ms, request_id LIMIT ?5"
        )
    }
    pub const ATTEMPTS: &str = "SELECT nonce, host, role, result, inference, input_tokens,
             output_tokens, reserved_cost, actual_cost, fee, cost, settled_ms
         FROM ledger_attempts WHERE request_id = ?1 ORDER BY nonce";
    pub const UNSETTLED: &str = "SELECT escrow_id, nonce FROM ledger_attempts
         WHERE settled_ms IS NULL ORDER BY escrow_id, nonce";

    /// The statement with PostgreSQL's placeholders (`?N` → `$N`; no `?` is literal here).
    pub fn pg(sql: &str) -> String {
        sql.replace('?', "$")
    }
}

pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: Option<i64>) -> Option<u64> {
    v.and_then(|x| u64::try_from(x).ok())
}

/// A result row of either database, read by column index.
pub(super) trait Columns {
    type Error;
    fn text(&self, i: usize) -> Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, Self::Error>;
    fn int(&self, i: usize) -> Result<Option<i64>, Self::Error>;
}

/// A request row from the columns of [`sql::get_request`] (attempts not loaded).
pub(super) fn request_row<C: Columns>(r: &C) -> Result<RequestRow, C::Error> {
    Ok(RequestRow {
        request_id: r.text(0)?,
        started_ms: r.int(1)?.unwrap_or(0),
        ended_ms: r.int(2)?.unwrap_or(0),
        model: r.text(3)?,
        escrow_id: r.text(4)?,
        api_key_id: r.text(5)?,
        stream: r.int(6)?.unwrap_or(0) != 0,
        outcome: r.text(7)?,
        status: u16::try_from(r.int(8)?.unwrap_or(0)).unwrap_or(0),
        winner_nonce: uint(r.int(9)?),
        input_tokens: uint(r.int(10)?),
        output_tokens: uint(r.int(11)?),
        reserved_cost: uint(r.int(12)?),
        actual_cost: uint(r.int(13)?),
        total_cost: uint(r.int(14)?),
        settled_ms: r.int(15)?,
        attempts: Vec::new(),
    })
}

/// An attempt row from the columns of [`sql::ATTEMPTS`].
pub(super) fn attempt_row<C: Columns>(r: &C) -> Result<AttemptRow, C::Error> {
    Ok(AttemptRow {
        nonce: uint(r.int(0)?).unwrap_or(0),
        host: r.text(1)?,
        role: r.text(2)?,
        result: r.text(3)?,
        inference: r.opt_text(4)?,
        input_tokens: uint(r.int(5)?),
        output_tokens: uint(r.int(6)?),
        reserved_cost: uint(r.int(7)?),
        actual_cost: uint(r.int(8)?),
        fee: uint(r.int(9)?),
        cost: uint(r.int(10)?),
        settled_ms: r.int(11)?,
    })
}

/// Where the ledger's reads go.
#[derive(Debug)]
enum Reads {
    Sqlite(PathBuf),
    Postgres(PgLedgerReads),
}

/// The ledger's writer and readers.
#[derive(Debug)]
pub struct LedgerStore {
    reads: Reads,
    /// `devshard_ledger_batches_total{result}` (registered by [`LedgerStore::register_metrics`]).
    batches: IntCounterVec,
    sender: Mutex<Option<UnboundedSender<Op>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl LedgerStore {
    /// Opens the ledger in the SQLite store file at `path` (opened and migrated by the store
    /// first) and starts its writer.
    pub fn open(path: &Path) -> Result<LedgerStore, StoreError> {
        let batches = batch_counter()?;
        let (sender, writer) = super::ledger_writer::start(path, batches.clone())?;
        Ok(LedgerStore {
            reads: Reads::Sqlite(path.to_path_buf()),
            batches,
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Opens the ledger in the PostgreSQL database of `target` (migrated by the store first).
    pub fn open_postgres(
        target: &super::postgres::PgTarget,
        log: Logger,
    ) -> Result<LedgerStore, StoreError> {
        let batches = batch_counter()?;
        let (sender, writer, reads) =
            super::postgres::ledger::start(target.clone(), batches.clone(), log)?;
        Ok(LedgerStore {
            reads: Reads::Postgres(reads),
            batches,
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Registers the ledger's metrics in `registry` (once).
    pub fn register_metrics(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.batches.clone()))
    }

    fn send(&self, op: Op) {
        let guard = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = guard.as_ref() {
            let _ = s.send(op);
        }
    }

    /// Queues a request row (ignored when the request is in the ledger already).
    pub fn insert(&self, row: RequestRow) {
        self.send(Op::Insert(Box::new(row)));
    }

    /// Queues settlements (each applies once; a request's cost columns are completed when its
    /// last attempt settles).
    pub fn settle(&self, settled: Vec<Settlement>) {
        for op in settle_ops(settled) {
            self.send(op);
        }
    }

    /// Queues the deletion of requests that ended before `before_ms`.
    pub fn prune(&self, before_ms: i64) {
        self.send(Op::Prune(before_ms));
    }

    /// Waits until everything queued so far is committed.
    pub fn flush(&self) {
        let (tx, rx) = channel();
        self.send(Op::Flush(tx));
        let _ = rx.recv();
    }

    /// Flushes and stops the writer.
    pub fn close(&self) {
        self.flush();
        drop(self.sender.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(h) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }

    /// One request with its attempts.
    pub fn get(&self, request_id: &str) -> Result<Option<RequestRow>, StoreError> {
        match &self.reads {
            Reads::Sqlite(path) => super::ledger_sqlite::get(path, request_id),
            Reads::Postgres(pg) => pg.get(request_id),
        }
    }

    /// Up to `limit` requests that ended in `[since_ms, until_ms)` after `after` (ended_ms,
    /// request_id), in that order, with their attempts.
    pub fn page(
        &self,
        since_ms: i64,
        until_ms: i64,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Result<Vec<RequestRow>, StoreError> {
        let after = after.unwrap_or((i64::MIN, String::new()));
        let range = (since_ms, until_ms, after, int(limit as u64));
        match &self.reads {
            Reads::Sqlite(path) => super::ledger_sqlite::page(path, range),
            Reads::Postgres(pg) => pg.page(range),
        }
    }

    /// Every unsettled attempt: (escrow, nonce), by escrow then nonce.
    pub fn unsettled(&self) -> Result<Vec<(String, u64)>, StoreError> {
        match &self.reads {
            Reads::Sqlite(path) => super::ledger_sqlite::unsettled(path),
            Reads::Postgres(pg) => pg.unsettled(),
        }
    }
}

/// A page's bounds: since, until, after (ended_ms, request_id), limit.
pub(super) type PageRange = (i64, i64, (i64, String), i64);

impl Drop for LedgerStore {
    fn drop(&mut self) {
        self.close();
    }
}
