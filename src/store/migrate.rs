//! `devshard-gateway migrate --from sqlite:PATH --to postgres://…`: moves a SQLite store (every
//! table: diffs with their warm deltas, records of every namespace, the cost ledger) into an
//! empty PostgreSQL database, in one transaction (all or nothing). A target that holds any row
//! already is refused. The source is brought to the current SQLite schema first, as the gateway
//! does when it starts.

use std::{path::PathBuf, process::ExitCode};

use devshard_actors::store::StoreError;
use rusqlite::types::Value;
use slog::{info, Logger};
use tokio_postgres::types::ToSql;

use super::{codec::sql_err, postgres, schema};

/// One column of a copied table.
#[derive(Clone, Copy)]
enum Col {
    Int,
    Text,
    Blob,
}

/// The tables moved, with their columns (the same names and order on both sides).
const TABLES: &[(&str, &[(&str, Col)])] = &[
    (
        "diffs",
        &[
            ("escrow_id", Col::Text),
            ("nonce", Col::Int),
            ("txs", Col::Blob),
            ("user_sig", Col::Blob),
            ("post_state_root", Col::Blob),
            ("warm_delta", Col::Text),
        ],
    ),
    (
        "records",
        &[
            ("namespace", Col::Text),
            ("key", Col::Text),
            ("value", Col::Text),
            ("updated_ms", Col::Int),
        ],
    ),
    (
        "ledger_requests",
        &[
            ("request_id", Col::Text),
            ("started_ms", Col::Int),
            ("ended_ms", Col::Int),
            ("model", Col::Text),
            ("escrow_id", Col::Text),
            ("api_key_id", Col::Text),
            ("stream", Col::Int),
            ("outcome", Col::Text),
            ("status", Col::Int),
            ("winner_nonce", Col::Int),
            ("input_tokens", Col::Int),
            ("output_tokens", Col::Int),
            ("reserved_cost", Col::Int),
            ("actual_cost", Col::Int),
            ("total_cost", Col::Int),
            ("settled_ms", Col::Int),
        ],
    ),
    (
        "ledger_attempts",
        &[
            ("request_id", Col::Text),
            ("nonce", Col::Int),
            ("escrow_id", Col::Text),
            ("host", Col::Text),
            ("role", Col::Text),
            ("result", Col::Text),
            ("inference", Col::Text),
            ("input_tokens", Col::Int),
            ("output_tokens", Col::Int),
            ("reserved_cost", Col::Int),
            ("actual_cost", Col::Int),
            ("fee", Col::Int),
            ("cost", Col::Int),
            ("settled_ms", Col::Int),
        ],
    ),
];

/// Tables that must be empty in the target (the leases too: a target in use is refused).
const TARGET_TABLES: [&str; 5] = [
    "diffs",
    "records",
    "ledger_requests",
    "ledger_attempts",
    "escrow_leases",
];

/// `migrate`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The SQLite store: `sqlite:PATH` (e.g. `sqlite:data/gateway.db`).
    #[arg(long)]
    pub from: String,
    /// The PostgreSQL database: `postgres://user@host:port/db` (`?sslmode=…&sslrootcert=…` as
    /// for the gateway's store URL).
    #[arg(long)]
    pub to: String,
}

/// Why a migration did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("--from must be sqlite:PATH, got {0:?}")]
    Source(String),
    #[error("the SQLite store {0} does not exist")]
    Missing(PathBuf),
    #[error("--to is not a PostgreSQL URL: {0}")]
    Target(String),
    #[error(transparent)]
    Connect(#[from] postgres::PgConnectError),
    #[error("the target database is not empty: table {table} has {rows} rows")]
    NotEmpty { table: String, rows: i64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Rows copied, per table.
pub type Copied = Vec<(String, u64)>;

/// Runs the command: logs the rows moved per table, or the reason it refused.
pub fn run(args: &MigrateArgs, log: &Logger) -> ExitCode {
    match migrate(&args.from, &args.to) {
        Ok(copied) => {
            for (table, rows) in &copied {
                info!(log, "table moved"; "stage" => "migrate_table", "table" => table.as_str(),
                    "rows" => rows);
            }
            info!(log, "store moved to PostgreSQL"; "stage" => "migrate_done",
                "to" => super::redact_url(&args.to));
            ExitCode::SUCCESS
        }
        Err(e) => {
            slog::error!(log, "migration refused"; "stage" => "migrate_failed", "error" => %e);
            ExitCode::FAILURE
        }
    }
}

/// Copies the SQLite store `from` (`sqlite:PATH`) into the empty database `to`.
pub fn migrate(from: &str, to: &str) -> Result<Copied, MigrateError> {
    let path = from
        .strip_prefix("sqlite:")
        .map(PathBuf::from)
        .ok_or_else(|| MigrateError::Source(from.to_string()))?;
    let target = postgres::PgTarget::parse(to, postgres::TlsKeys::default())
        .map_err(|e| MigrateError::Target(e.to_string()))?;
    migrate_to(&path, &target)
}

/// How long `migrate`'s connect may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`migrate`] with a parsed target.
pub fn migrate_to(
    path: &std::path::Path,
    target: &postgres::PgTarget,
) -> Result<Copied, MigrateError> {
    if !path.exists() {
        return Err(MigrateError::Missing(path.to_path_buf()));
    }
    drop(schema::open_writer(path)?);
    let source = schema::open_reader(path)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Io(format!("runtime: {e}")))?;
    rt.block_on(copy_all(&source, target))
}

async fn copy_all(
    source: &rusqlite::Connection,
    target: &postgres::PgTarget,
) -> Result<Copied, MigrateError> {
    let (mut client, connection, _) = postgres::target::connect(target, CONNECT_TIMEOUT).await?;
    let conn = tokio::spawn(connection);
    postgres::schema::migrate(&mut client).await?;
    let tx = client.transaction().await.map_err(postgres::pg_err)?;
    for table in TARGET_TABLES {
        let rows: i64 = tx
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .map_err(postgres::pg_err)?
            .get(0);
        if rows > 0 {
            return Err(MigrateError::NotEmpty {
                table: table.to_string(),
                rows,
            });
        }
    }
    let mut copied = Vec::new();
    for (table, cols) in TABLES {
        let names: Vec<&str> = cols.iter().map(|(n, _)| *n).collect();
        let placeholders: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
        let insert = tx
            .prepare(&format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                names.join(", "),
                placeholders.join(", ")
            ))
            .await
            .map_err(postgres::pg_err)?;
        let rows = read_table(source, table, cols)?;
        for row in &rows {
            let params: Vec<&(dyn ToSql + Sync)> = row.iter().map(|p| p.as_sql()).collect();
            tx.execute(&insert, &params)
                .await
                .map_err(postgres::pg_err)?;
        }
        copied.push((table.to_string(), rows.len() as u64));
    }
    tx.commit().await.map_err(postgres::pg_err)?;
    drop(client);
    let _ = conn.await;
    Ok(copied)
}

/// A column value on its way to PostgreSQL.
enum Param {
    Int(Option<i64>),
    Text(Option<String>),
    Blob(Option<Vec<u8>>),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Int(v) => v,
            Param::Text(v) => v,
            Param::Blob(v) => v,
        }
    }
}

fn read_table(
    source: &rusqlite::Connection,
    table: &str,
    cols: &[(&str, Col)],
) -> Result<Vec<Vec<Param>>, StoreError> {
    let names: Vec<&str> = cols.iter().map(|(n, _)| *n).collect();
    let mut st = source
        .prepare(&format!("SELECT {} FROM {table}", names.join(", ")))
        .map_err(sql_err)?;
    let rows = st
        .query_map([], |r| {
            cols.iter()
                .enumerate()
                .map(|(i, (name, col))| param(r.get::<_, Value>(i)?, *col, table, name))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(sql_err)?;
    rows.map(|r| r.map_err(sql_err)).collect()
}

fn param(value: Value, col: Col, table: &str, name: &str) -> rusqlite::Result<Param> {
    let mismatch = || {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Null,
            format!("{table}.{name}: unexpected value type").into(),
        )
    };
    Ok(match (col, value) {
        (Col::Int, Value::Integer(v)) => Param::Int(Some(v)),
        (Col::Int, Value::Null) => Param::Int(None),
        (Col::Text, Value::Text(v)) => Param::Text(Some(v)),
        (Col::Text, Value::Null) => Param::Text(None),
        (Col::Blob, Value::Blob(v)) => Param::Blob(Some(v)),
        (Col::Blob, Value::Null) => Param::Blob(None),
        _ => return Err(mismatch()),
    })
}
