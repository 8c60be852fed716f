//! The single writer thread and its group commit.
//!
//! The writer owns the only read-write connection. It blocks for the first queued [`Msg`], drains
//! whatever else is already queued (up to [`MAX_GROUP`] ops) without waiting, applies the whole
//! group in one `BEGIN IMMEDIATE … COMMIT` (one WAL fsync under `synchronous=FULL`), and only then
//! resolves every op's ack — each with its own result. Every op is a single SQL statement after
//! validation (the out-of-order check runs against an in-memory cache of the last nonce of each
//! escrow), so an op that fails is undone by SQLite's statement rollback and fails alone; the rest
//! of the group still commits. If an error aborts the whole transaction (disk full, i/o) or the
//! commit itself fails, every op of the group fails and the nonce cache is dropped.

use std::{
    collections::HashMap,
    sync::{atomic::Ordering, mpsc::Receiver, Arc},
};

use devshard_actors::store::StoreError;
use rusqlite::{params, Connection, OptionalExtension};

use super::{
    codec::sql_err,
    ops::{AckTx, Counters, Msg, Op},
    MAX_GROUP,
};

pub(crate) struct Writer {
    conn: Connection,
    /// Last appended nonce per escrow; absent = not loaded yet (or invalidated).
    last_nonce: HashMap<String, u64>,
    counters: Arc<Counters>,
}

impl Writer {
    pub(crate) fn new(conn: Connection, counters: Arc<Counters>) -> Writer {
        Writer {
            conn,
            last_nonce: HashMap::new(),
            counters,
        }
    }

    /// The thread body: runs until [`Msg::Shutdown`] or until every sender is gone.
    pub(crate) fn run(mut self, rx: Receiver<Msg>) {
        let mut group: Vec<(Op, AckTx)> = Vec::with_capacity(MAX_GROUP);
        let mut stop = false;
        while !stop {
            match rx.recv() {
                Ok(Msg::Write(op, ack)) => group.push((op, ack)),
                Ok(Msg::Shutdown) | Err(_) => break,
            }
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(Msg::Write(op, ack)) => group.push((op, ack)),
                    Ok(Msg::Shutdown) => {
                        stop = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.commit_group(&mut group);
        }
        // Clean shutdown: fold the WAL back into the main file. Best effort — the data is
        // already durable in the WAL.
        let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
    }

    fn commit_group(&mut self, group: &mut Vec<(Op, AckTx)>) {
        let writes = group
            .iter()
            .filter(|(op, _)| !matches!(op, Op::Flush))
            .count();
        if writes == 0 {
            // Only flushes: every earlier group has already committed.
            resolve_all(group, &Ok(()));
            return;
        }
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            self.fail_group(group, sql_err(e));
            return;
        }
        let mut results = Vec::with_capacity(group.len());
        for (op, _) in group.iter() {
            let result = self.apply(op);
            if let Err(e) = &result {
                if self.conn.is_autocommit() {
                    // The error rolled back the whole transaction: nothing of the group stands.
                    let e = StoreError::Io(format!("group rolled back: {e}"));
                    self.fail_group(group, e);
                    return;
                }
            }
            results.push(result);
        }
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let _ = self.conn.execute_batch("ROLLBACK");
            self.fail_group(group, sql_err(e));
            return;
        }
        let ok = results
            .iter()
            .zip(group.iter())
            .filter(|(r, (op, _))| r.is_ok() && !matches!(op, Op::Flush));
        let committed = ok.count() as u64;
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        self.counters.ops.fetch_add(committed, Ordering::Relaxed);
        self.counters
            .last_group
            .store(writes as u64, Ordering::Relaxed);
        for ((_, ack), result) in group.drain(..).zip(results) {
            let _ = ack.send(result);
        }
    }

    /// Fails every op of the group with `e` and forgets cached nonces (they may not have stuck).
    fn fail_group(&mut self, group: &mut Vec<(Op, AckTx)>, e: StoreError) {
        self.last_nonce.clear();
        resolve_all(group, &Err(e));
    }

    fn apply(&mut self, op: &Op) -> Result<(), StoreError> {
        match op {
            Op::AppendDiff { escrow, row, .. } => {
                let last = self.last_nonce(escrow)?;
                let got = u64::try_from(row.nonce).unwrap_or(0);
                if got <= last {
                    return Err(StoreError::OutOfOrder {
                        escrow: escrow.clone(),
                        last,
                        got,
                    });
                }
                self.conn
                    .prepare_cached(
                        "INSERT INTO diffs \
                         (escrow_id, nonce, txs, user_sig, post_state_root, warm_delta) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )
                    .and_then(|mut st| {
                        st.execute(params![
                            escrow,
                            row.nonce,
                            row.txs,
                            row.user_sig,
                            row.post_state_root,
                            row.warm_delta
                        ])
                    })
                    .map_err(sql_err)?;
                self.last_nonce.insert(escrow.clone(), got);
            }
            Op::DeleteDiffs { escrow } => {
                self.conn
                    .prepare_cached("DELETE FROM diffs WHERE escrow_id = ?1")
                    .and_then(|mut st| st.execute(params![escrow]))
                    .map_err(sql_err)?;
                self.last_nonce.remove(escrow);
            }
            Op::Put {
                namespace,
                key,
                json,
                updated_ms,
                ..
            } => {
                self.conn
                    .prepare_cached(
                        "INSERT INTO records (namespace, key, value, updated_ms) \
                         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (namespace, key) \
                         DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
                    )
                    .and_then(|mut st| st.execute(params![namespace, key, json, updated_ms]))
                    .map_err(sql_err)?;
            }
            Op::Delete { namespace, key } => {
                self.conn
                    .prepare_cached("DELETE FROM records WHERE namespace = ?1 AND key = ?2")
                    .and_then(|mut st| st.execute(params![namespace, key]))
                    .map_err(sql_err)?;
            }
            Op::Flush => {}
        }
        Ok(())
    }

    /// The last appended nonce of an escrow (0 when its log is empty), loaded on first use.
    fn last_nonce(&mut self, escrow: &str) -> Result<u64, StoreError> {
        if let Some(n) = self.last_nonce.get(escrow) {
            return Ok(*n);
        }
        let max: Option<i64> = self
            .conn
            .prepare_cached("SELECT MAX(nonce) FROM diffs WHERE escrow_id = ?1")
            .and_then(|mut st| st.query_row(params![escrow], |r| r.get(0)).optional())
            .map_err(sql_err)?
            .flatten();
        let last = match max {
            None => 0,
            Some(n) => u64::try_from(n)
                .map_err(|_| StoreError::Corrupt(format!("escrow {escrow}: nonce {n}")))?,
        };
        self.last_nonce.insert(escrow.to_string(), last);
        Ok(last)
    }
}

fn resolve_all(group: &mut Vec<(Op, AckTx)>, result: &Result<(), StoreError>) {
    for (_, ack) in group.drain(..) {
        let _ = ack.send(result.clone());
    }
}
