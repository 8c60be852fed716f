//! The cost ledger's tables in `gateway.db` (schema version 2): `ledger_requests`, one row per
//! request that reached an escrow, and `ledger_attempts`, one row per nonce its race used (loser
//! attempts and unused grants included).
//!
//! Writes go through one thread, `ledger-writer` (`super::ledger_writer`), with its own connection (`synchronous=NORMAL`:
//! the ledger is an account of what happened, not protocol state, so it does not take the diff
//! log's fsync per commit; WAL keeps it consistent and a clean shutdown flushes it). The writer
//! drains whatever is queued (up to [`MAX_BATCH`] ops) into one transaction. Reads open their own
//! read-only connection (WAL: they never wait for the writer).
//!
//! A request row is inserted when the request ends (outcome known, race reported); its cost
//! columns stay `NULL` until every attempt is settled ([`LedgerStore::settle`]), which the
//! settlement tail (`crate::state::ledger`) does from the escrow's durable diff log.

use std::{
    path::{Path, PathBuf},
    sync::{
        mpsc::{channel, Sender},
        Mutex,
    },
    thread::JoinHandle,
};

use devshard_actors::store::StoreError;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;

use super::{codec::sql_err, schema};

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

pub(super) enum Op {
    Insert(Box<RequestRow>),
    Settle(Vec<Settlement>),
    Prune(i64),
    Flush(Sender<()>),
}

/// The ledger's writer and readers.
#[derive(Debug)]
pub struct LedgerStore {
    path: PathBuf,
    sender: Mutex<Option<Sender<Op>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

pub(super) fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: Option<i64>) -> Option<u64> {
    v.and_then(|x| u64::try_from(x).ok())
}

impl LedgerStore {
    /// Opens the ledger in the SQLite file at `path` (the store's own file, or a file of its own
    /// when the store is PostgreSQL: then the schema is created here) and starts its writer.
    pub fn open(path: &Path) -> Result<LedgerStore, StoreError> {
        if !path.exists() {
            drop(schema::open_writer(path)?);
        }
        let conn = Connection::open(path).map_err(sql_err)?;
        conn.busy_timeout(schema::BUSY_TIMEOUT).map_err(sql_err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql_err)?;
        if schema::user_version(&conn)? < 2 {
            return Err(StoreError::Io(
                "the ledger tables are missing (open the store first)".into(),
            ));
        }
        let (tx, rx) = channel();
        let handle = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || super::ledger_writer::run(conn, rx))
            .map_err(|e| StoreError::Io(format!("spawning the ledger writer: {e}")))?;
        Ok(LedgerStore {
            path: path.to_path_buf(),
            sender: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(handle)),
        })
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
        if !settled.is_empty() {
            self.send(Op::Settle(settled));
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

    fn reader(&self) -> Result<Connection, StoreError> {
        schema::open_reader(&self.path)
    }

    /// One request with its attempts.
    pub fn get(&self, request_id: &str) -> Result<Option<RequestRow>, StoreError> {
        let conn = self.reader()?;
        let row = conn
            .query_row(
                &format!("SELECT {REQUEST_COLUMNS} FROM ledger_requests WHERE request_id = ?1"),
                params![request_id],
                request_row,
            )
            .optional()
            .map_err(sql_err)?;
        row.map(|r| with_attempts(&conn, r)).transpose()
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
        let conn = self.reader()?;
        let (after_ms, after_id) = after.unwrap_or((i64::MIN, String::new()));
        let mut st = conn
            .prepare(&format!(
                "SELECT {REQUEST_COLUMNS} FROM ledger_requests
                 WHERE ended_ms >= ?1 AND ended_ms < ?2 AND (ended_ms, request_id) > (?3, ?4)
                 ORDER BY ended_ms, request_id LIMIT ?5"
            ))
            .map_err(sql_err)?;
        let rows = st
            .query_map(
                params![since_ms, until_ms, after_ms, after_id, int(limit as u64)],
                request_row,
            )
            .map_err(sql_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_err)?;
        rows.into_iter().map(|r| with_attempts(&conn, r)).collect()
    }

    /// Every unsettled attempt: (escrow, nonce), by escrow then nonce.
    pub fn unsettled(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.reader()?;
        let mut st = conn
            .prepare(
                "SELECT escrow_id, nonce FROM ledger_attempts WHERE settled_ms IS NULL
                 ORDER BY escrow_id, nonce",
            )
            .map_err(sql_err)?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(sql_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(sql_err)?;
        Ok(rows
            .into_iter()
            .map(|(e, n)| (e, u64::try_from(n).unwrap_or(0)))
            .collect())
    }
}

impl Drop for LedgerStore {
    fn drop(&mut self) {
        self.close();
    }
}

const REQUEST_COLUMNS: &str = "request_id, started_ms, ended_ms, model, escrow_id, api_key_id,
    stream, outcome, status, winner_nonce, input_tokens, output_tokens, reserved_cost,
    actual_cost, total_cost, settled_ms";

fn request_row(r: &Row<'_>) -> rusqlite::Result<RequestRow> {
    Ok(RequestRow {
        request_id: r.get(0)?,
        started_ms: r.get(1)?,
        ended_ms: r.get(2)?,
        model: r.get(3)?,
        escrow_id: r.get(4)?,
        api_key_id: r.get(5)?,
        stream: r.get::<_, i64>(6)? != 0,
        outcome: r.get(7)?,
        status: u16::try_from(r.get::<_, i64>(8)?).unwrap_or(0),
        winner_nonce: uint(r.get(9)?),
        input_tokens: uint(r.get(10)?),
        output_tokens: uint(r.get(11)?),
        reserved_cost: uint(r.get(12)?),
        actual_cost: uint(r.get(13)?),
        total_cost: uint(r.get(14)?),
        settled_ms: r.get(15)?,
        attempts: Vec::new(),
    })
}

fn with_attempts(conn: &Connection, mut row: RequestRow) -> Result<RequestRow, StoreError> {
    let mut st = conn
        .prepare_cached(
            "SELECT nonce, host, role, result, inference, input_tokens, output_tokens,
                    reserved_cost, actual_cost, fee, cost, settled_ms
             FROM ledger_attempts WHERE request_id = ?1 ORDER BY nonce",
        )
        .map_err(sql_err)?;
    row.attempts = st
        .query_map(params![row.request_id], |r| {
            Ok(AttemptRow {
                nonce: uint(r.get(0)?).unwrap_or(0),
                host: r.get(1)?,
                role: r.get(2)?,
                result: r.get(3)?,
                inference: r.get(4)?,
                input_tokens: uint(r.get(5)?),
                output_tokens: uint(r.get(6)?),
                reserved_cost: uint(r.get(7)?),
                actual_cost: uint(r.get(8)?),
                fee: uint(r.get(9)?),
                cost: uint(r.get(10)?),
                settled_ms: r.get(11)?,
            })
        })
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    Ok(row)
}
