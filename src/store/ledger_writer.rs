//! The cost ledger's writer thread (`ledger-writer`, started by [`super::ledger::LedgerStore`]):
//! drains queued ops into one transaction each, and the SQL that inserts request rows and settles
//! attempts. Settling finds attempts by `(escrow_id, nonce)` through the `ledger_attempts_nonce`
//! index (schema version 4), so it costs the same at any ledger size.

use std::sync::mpsc::Receiver;

use rusqlite::{params, Connection, Transaction};

use super::ledger::{int, Op, RequestRow, Settlement, MAX_BATCH};

pub(super) fn run(mut conn: Connection, rx: Receiver<Op>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let mut flushed = Vec::new();
        // A failed batch is dropped: the ledger never blocks serving (logged by the caller's
        // metrics through the row counts it reads back).
        if let Ok(tx) = conn.transaction() {
            for op in batch {
                let _ = match op {
                    Op::Insert(row) => insert(&tx, &row),
                    Op::Settle(s) => s.iter().try_for_each(|s| settle(&tx, s)),
                    Op::Prune(before) => prune(&tx, before),
                    Op::Flush(done) => {
                        flushed.push(done);
                        Ok(())
                    }
                };
            }
            let _ = tx.commit();
        }
        for done in flushed {
            let _ = done.send(());
        }
    }
}

fn insert(tx: &Transaction<'_>, r: &RequestRow) -> rusqlite::Result<()> {
    let settled = r.attempts.is_empty().then_some(r.ended_ms);
    let zero = r.attempts.is_empty().then_some(0i64);
    let added = tx.execute(
        "INSERT OR IGNORE INTO ledger_requests (request_id, started_ms, ended_ms, model,
             escrow_id, api_key_id, stream, outcome, status, winner_nonce, total_cost, settled_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
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
        ],
    )?;
    if added == 0 {
        return Ok(());
    }
    let mut st = tx.prepare_cached(
        "INSERT OR IGNORE INTO ledger_attempts (request_id, nonce, escrow_id, host, role, result)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
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

/// Completes the request rows whose last attempt `(escrow ?1, nonce ?2)` just settled.
const COMPLETE_REQUESTS: &str = "UPDATE ledger_requests SET
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

fn settle(tx: &Transaction<'_>, s: &Settlement) -> rusqlite::Result<()> {
    let changed = tx
        .prepare_cached(
            "UPDATE ledger_attempts SET inference = ?3, input_tokens = ?4, output_tokens = ?5,
             reserved_cost = ?6, actual_cost = ?7, fee = ?8, cost = ?9, settled_ms = ?10
         WHERE escrow_id = ?1 AND nonce = ?2 AND settled_ms IS NULL",
        )?
        .execute(params![
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
    tx.prepare_cached(COMPLETE_REQUESTS)?.execute(params![
        s.escrow_id,
        int(s.nonce),
        s.settled_ms
    ])?;
    Ok(())
}

fn prune(tx: &Transaction<'_>, before_ms: i64) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM ledger_attempts WHERE request_id IN
             (SELECT request_id FROM ledger_requests WHERE ended_ms < ?1)",
        params![before_ms],
    )?;
    tx.execute(
        "DELETE FROM ledger_requests WHERE ended_ms < ?1",
        params![before_ms],
    )?;
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
        let complete = plan(COMPLETE_REQUESTS);
        assert!(!complete.contains("SCAN"), "{complete}");
        assert!(complete.contains("ledger_attempts_nonce"), "{complete}");
        drop(tx);
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
