//! The cost ledger's reads on SQLite: each opens a read-only connection to the store file (WAL:
//! it never waits for the writer), with the SQL both databases share
//! ([`super::ledger::sql`]).

use std::path::Path;

use devshard_actors::store::StoreError;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{
    codec::sql_err,
    ledger::{attempt_row, request_row, sql, Columns, PageRange, RequestRow},
    schema,
};

impl Columns for Row<'_> {
    type Error = rusqlite::Error;
    fn text(&self, i: usize) -> Result<String, rusqlite::Error> {
        self.get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, rusqlite::Error> {
        self.get(i)
    }
    fn int(&self, i: usize) -> Result<Option<i64>, rusqlite::Error> {
        self.get(i)
    }
}

/// One request with its attempts.
pub(super) fn get(path: &Path, request_id: &str) -> Result<Option<RequestRow>, StoreError> {
    let conn = schema::open_reader(path)?;
    let row = conn
        .query_row(&sql::get_request(), params![request_id], |r| request_row(r))
        .optional()
        .map_err(sql_err)?;
    row.map(|r| with_attempts(&conn, r)).transpose()
}

/// A page of requests with their attempts.
pub(super) fn page(path: &Path, range: PageRange) -> Result<Vec<RequestRow>, StoreError> {
    let conn = schema::open_reader(path)?;
    let (since_ms, until_ms, (after_ms, after_id), limit) = range;
    let mut st = conn.prepare(&sql::page()).map_err(sql_err)?;
    let rows = st
        .query_map(
            params![since_ms, until_ms, after_ms, after_id, limit],
            |r| request_row(r),
        )
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    rows.into_iter().map(|r| with_attempts(&conn, r)).collect()
}

/// Every unsettled attempt: (escrow, nonce), by escrow then nonce.
pub(super) fn unsettled(path: &Path) -> Result<Vec<(String, u64)>, StoreError> {
    let conn = schema::open_reader(path)?;
    let mut st = conn.prepare(sql::UNSETTLED).map_err(sql_err)?;
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

fn with_attempts(conn: &Connection, mut row: RequestRow) -> Result<RequestRow, StoreError> {
    let mut st = conn.prepare_cached(sql::ATTEMPTS).map_err(sql_err)?;
    row.attempts = st
        .query_map(params![row.request_id], |r| attempt_row(r))
        .map_err(sql_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_err)?;
    Ok(row)
}
