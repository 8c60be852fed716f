//! The cost ledger's SQLite writer thread (`ledger-writer`, started by
//! [`super::ledger::LedgerStore::open`]): applies each batch ([`super::ledger::next_batch`]) in
//! one transaction, with the SQL both databases share ([`super::ledger::sql`]). Settling finds
//! attempts by `(escrow_id, nonce)` through the `ledger_attempts_nonce` index (schema version 4),
//! so it costs the same at any ledger size.

use std::{path::Path, thread::JoinHandle};

use devshard_actors::store::StoreError;
use prometheus::IntCounterVec;
use rusqlite::{params, Connection, Transaction};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::{
    codec::sql_err,
    ledger::{count_batch, int, next_batch, sql, Op, RequestRow, Settlement},
    schema,
};

/// Opens the writer's connection to the store file at `path` and starts the thread.
pub(super) fn start(
    path: &Path,
    batches: IntCounterVec,
) -> Result<(UnboundedSender<Op>, JoinHandle<()>), StoreError> {
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
    let (tx, rx) = unbounded_channel();
    let handle = std::thread::Builder::new()
        .name("ledger-writer".into())
        .spawn(move || run(conn, rx, &batches))
        .map_err(|e| StoreError::Io(format!("spawning the ledger writer: {e}")))?;
    Ok((tx, handle))
}

fn run(mut conn: Connection, mut rx: UnboundedReceiver<Op>, batches: &IntCounterVec) {
    while let Some(first) = rx.blocking_recv() {
        let batch = next_batch(first, &mut rx);
        // A failed batch is dropped: the ledger never blocks serving. A failed op alone leaves
        // the others of its batch to commit (SQLite does not abort the transaction).
        let committed = conn.transaction().and_then(|tx| {
            for op in &batch.ops {
                let _ = match op {
                    Op::Insert(row) => insert(&tx, row),
                    Op::Settle(s) => s.iter().try_for_each(|s| settle(&tx, s)),
                    Op::Prune(before) => prune(&tx, *before),
                    Op::Flush(_) => Ok(()),
                };
            }
            tx.commit()
        });
        if !batch.ops.is_empty() {
            count_batch(batches, committed.is_ok());
        }
        batch.done();
    }
}

fn insert(tx: &Transaction<'_>, r: &RequestRow) -> rusqlite::Result<()> {
    let settled = r.attempts.is_empty().then_some(r.ended_ms);
    let zero = r.attempts.is_empty().then_some(0i64);
    let added = tx.prepare_cached(sql::INSERT_REQUEST)?.execute(params![
        r.request_id,
        r.started_ms,
        r.ended_ms,
        r.model,
        r.escrow_id,
        r.api_key_id,
        i64::from(r.stream),
        r.outcome,
        i64::from(r.status),
        r.winner_nonce.map(int),
        zero,
        settled
    ])?;
    if added == 0 {
        return Ok(());
    }
    let mut st = tx.prepare_cached(sql::INSERT_ATTEMPT)?;
    for a in &r.attempts {
        st.execute(params![
            r.request_id,
            int(a.nonce),
            r.escrow_id,
            a.host,
            a.role,
            a.result
        ])?;
    }
    Ok(())
}

fn settle(tx: &Transaction<'_>, s: &Settlement) -> rusqlite::Result<()> {
    let changed = tx.prepare_cached(sql::SETTLE_ATTEMPT)?.execute(params![
        s.escrow_id,
        int(s.nonce),
        s.inference,
        int(s.input_tokens),
        int(s.output_tokens),
        int(s.reserved_cost),
        int(s.actual_cost),
        int(s.fee),
        int(s.actual_cost.saturating_add(s.fee)),
        s.settled_ms
    ])?;
    if changed == 0 {
        return Ok(());
    }
    tx.prepare_cached(sql::COMPLETE_REQUESTS)?.execute(params![
        s.escrow_id,
        int(s.nonce),
        s.settled_ms
    ])?;
    Ok(())
}

fn prune(tx: &Transaction<'_>, before_ms: i64) -> rusqlite::Result<()> {
    tx.execute(sql::PRUNE_ATTEMPTS, params![before_ms])?;
    tx.execute(sql::PRUNE_REQUESTS, params![before_ms])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema;

    /// Regression: every settlement used to scan the whole attempts table (the partial
    /// "unsettled" index stops covering an attempt once it is settled), which made the ledger
    /// writer the costliest thread of the benchmark.
    #[test]
    fn settling_a_nonce_uses_indexes_not_a_table_scan() {
        let dir = std::env::temp_dir().join(format!("ledger-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("gateway.db");
        let mut conn = schema::open_writer(&path).unwrap();
        let tx = conn.transaction().unwrap();
        let plan = |sql: &str| -> String {
            let mut st = tx.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = st
                .query_map(["e", "1", "2"], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            rows.join("\n")
        };
        let complete = plan(sql::COMPLETE_REQUESTS);
        assert!(!complete.contains("SCAN"), "{complete}");
        assert!(complete.contains("ledger_attempts_nonce"), "{complete}");
        drop(tx);
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
