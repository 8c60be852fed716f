//! One connection of the PostgreSQL store that comes back by itself.
//!
//! A [`Link`] holds the current client of one connection (the writer's, the readers', the
//! leases'). Its supervisor task, on the store's runtime, awaits the connection; when it ends
//! (server stopped or restarted, network cut) the link is emptied, stage `store_disconnected` is
//! logged, and the task reconnects with back-off ([`retry_delay`]: 100 ms doubling to 2 s) until
//! it succeeds (stage `store_reconnected`, `devshard_store_reconnects_total{connection}`).
//! Meanwhile [`Link::client`] fails at once with [`Unavailable::Disconnected`]: no caller waits
//! for the database to come back.
//!
//! Errors of a connection are classified by [`is_connection_lost`] (pure): a closed or broken
//! connection, or a server that is shutting down or not accepting connections, is
//! [`StoreError::Unavailable`]; anything else is an SQL error. Every connection is opened by
//! `target::connect` (TLS as the URL's `sslmode` says); whether it is encrypted is in
//! [`LinkStatus::tls`].

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use devshard_actors::store::{retry::retry_delay, StoreError, Unavailable};
use slog::{debug, info, warn, Logger};
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::{
    pg_err,
    target::{self, Negotiated, PgConnectError, PgTarget},
};

/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Which connection of the store (the `connection` label of its metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Writer,
    Reader,
    Leases,
    /// The cost ledger's writer and readers (`ledger.rs`).
    LedgerWriter,
    LedgerReader,
}

impl LinkKind {
    /// The metric label and log value.
    pub fn label(self) -> &'static str {
        match self {
            LinkKind::Writer => "writer",
            LinkKind::Reader => "reader",
            LinkKind::Leases => "leases",
            LinkKind::LedgerWriter => "ledger_writer",
            LinkKind::LedgerReader => "ledger_reader",
        }
    }
}

/// Whether a connection is up, and how often it came back (for the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    pub kind: LinkKind,
    pub up: bool,
    pub reconnects: u64,
    /// Whether its current (or last) connection is encrypted.
    pub tls: bool,
}

/// One connection of the store; see the module docs.
#[derive(Debug)]
pub(super) struct Link {
    kind: LinkKind,
    client: Mutex<Option<Arc<Client>>>,
    reconnects: AtomicU64,
    tls: AtomicBool,
}

impl Link {
    /// The current client, or [`Unavailable::Disconnected`] at once while reconnecting.
    pub fn client(&self) -> Result<Arc<Client>, StoreError> {
        let current = self.client.lock().unwrap_or_else(|e| e.into_inner());
        match current.as_ref() {
            Some(c) if !c.is_closed() => Ok(c.clone()),
            _ => Err(StoreError::Unavailable(Unavailable::Disconnected)),
        }
    }

    pub fn status(&self) -> LinkStatus {
        LinkStatus {
            kind: self.kind,
            up: self.client().is_ok(),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            tls: self.tls.load(Ordering::Relaxed),
        }
    }

    fn set(&self, client: Option<(Client, Negotiated)>) {
        if let Some((_, n)) = &client {
            self.tls.store(n.tls, Ordering::Relaxed);
        }
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = client.map(|(c, _)| Arc::new(c));
    }
}

/// Connects once (the store's open fails if this fails), then keeps the connection up: the
/// supervisor task spawned on the current runtime reconnects after every loss.
pub(super) async fn open_link(
    kind: LinkKind,
    target: &PgTarget,
    log: &Logger,
) -> Result<Arc<Link>, StoreError> {
    let (client, connection, negotiated) = connect(target).await.map_err(opening)?;
    let link = Arc::new(Link {
        kind,
        client: Mutex::new(Some(Arc::new(client))),
        reconnects: AtomicU64::new(0),
        tls: AtomicBool::new(negotiated.tls),
    });
    let log = log.new(slog::o!("connection" => kind.label()));
    tokio::spawn(supervise(link.clone(), target.clone(), connection, log));
    Ok(link)
}

/// A connection of its own, not supervised (the schema migration at open); it closes when the
/// client is dropped.
pub(super) async fn connect_once(target: &PgTarget) -> Result<(Client, Negotiated), StoreError> {
    let (client, _driver, negotiated) = connect(target).await.map_err(opening)?;
    Ok((client, negotiated))
}

/// The store's open fails with the typed cause in its message (host and mode, no secret).
fn opening(e: PgConnectError) -> StoreError {
    StoreError::Io(format!("connecting to {e}"))
}

type ConnectionTask = JoinHandle<Result<(), tokio_postgres::Error>>;

/// A new connection, its driver spawned, `synchronous_commit = on` set.
async fn connect(
    target: &PgTarget,
) -> Result<(Client, ConnectionTask, Negotiated), PgConnectError> {
    let (client, connection, negotiated) = target::connect(target, CONNECT_TIMEOUT).await?;
    let task = tokio::spawn(connection);
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .map_err(|e| PgConnectError {
            host: target.host(),
            mode: negotiated.mode,
            failure: target::ConnectFailure::Failed(e.to_string()),
        })?;
    Ok((client, task, negotiated))
}

/// Awaits the connection; on its end empties the link and reconnects with back-off. Runs until
/// the store's runtime is dropped.
async fn supervise(link: Arc<Link>, target: PgTarget, mut connection: ConnectionTask, log: Logger) {
    loop {
        let error = match connection.await {
            Ok(Ok(())) => "closed by the server".to_string(),
            Ok(Err(e)) => pg_err(e).to_string(),
            Err(e) => e.to_string(),
        };
        link.set(None);
        warn!(log, "PostgreSQL connection lost; reconnecting"; "stage" => "store_disconnected",
            "error" => error);
        let mut failures = 0u32;
        connection = loop {
            failures = failures.saturating_add(1);
            tokio::time::sleep(retry_delay(failures)).await;
            match connect(&target).await {
                Ok((client, task, negotiated)) => {
                    link.set(Some((client, negotiated)));
                    link.reconnects.fetch_add(1, Ordering::Relaxed);
                    info!(log, "PostgreSQL connection back"; "stage" => "store_reconnected",
                        "attempts" => failures, "tls" => negotiated.tls,
                        "sslmode" => negotiated.mode.as_str());
                    break task;
                }
                Err(e) => debug!(log, "PostgreSQL reconnect failed";
                    "stage" => "store_reconnect_failed", "attempt" => failures, "error" => %e),
            }
        };
    }
}

/// Runs `body` between `BEGIN` and `COMMIT` on `client`, whose user runs one transaction at a
/// time; `ROLLBACK` when the body fails.
pub(super) async fn in_transaction<T>(
    client: &Client,
    body: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    client.batch_execute("BEGIN").await.map_err(pg_err)?;
    match body.await {
        Ok(v) => {
            client.batch_execute("COMMIT").await.map_err(pg_err)?;
            Ok(v)
        }
        Err(e) => {
            rollback(client).await;
            Err(e)
        }
    }
}

/// Ends a failed transaction (nothing to do when the connection is gone: the server rolls it
/// back).
pub(super) async fn rollback(client: &Client) {
    if !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
}

/// Whether an error means the connection is gone or the server is not serving: the connection
/// closed, an i/o error, SQLSTATE class 08 (connection exception) or 57P01–57P03 (shutdown,
/// crash, cannot connect now).
pub(super) fn is_connection_lost(closed: bool, io: bool, sqlstate: Option<&str>) -> bool {
    closed
        || io
        || sqlstate.is_some_and(|c| c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_and_shutdowns_are_unavailable_sql_errors_are_not() {
        assert!(is_connection_lost(true, false, None));
        assert!(is_connection_lost(false, true, None));
        assert!(is_connection_lost(false, false, Some("57P01")));
        assert!(is_connection_lost(false, false, Some("08006")));
        assert!(!is_connection_lost(false, false, Some("23505")));
        assert!(!is_connection_lost(false, false, Some("40001")));
        assert!(!is_connection_lost(false, false, None));
    }
}
