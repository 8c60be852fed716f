//! The cost ledger on PostgreSQL: the replicas share `ledger_requests`/`ledger_attempts`, so any
//! replica answers `GET /v1/requests/{id}` and the export for any request.
//!
//! One thread per process, `ledger-writer`, owns a current-thread runtime and two connections
//! that reconnect by themselves like the store's (`link.rs`): the writer's and the readers'. The
//! writer applies each batch ([`next_batch`]) in one transaction with statements prepared once
//! per connection, from the SQL both databases share ([`sql`]). A failed batch (or one that
//! finds the database unavailable) is dropped and logged (stage `ledger_batch_failed`): the
//! ledger never blocks serving. Reads wait for their answer on the caller's thread, as the
//! store's reads do.

use std::{
    sync::{mpsc::sync_channel, Arc},
    thread::JoinHandle,
};

use devshard_actors::store::StoreError;
use prometheus::IntCounterVec;
use slog::{warn, Logger};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_postgres::{Client, Row, Statement};

use super::{
    link::{open_link, rollback, Link, LinkKind},
    pg_err,
};
use crate::store::ledger::{
    attempt_row, count_batch, int, next_batch, request_row, sql, Columns, Op, PageRange,
    RequestRow, Settlement,
};

impl Columns for Row {
    type Error = tokio_postgres::Error;
    fn text(&self, i: usize) -> Result<String, tokio_postgres::Error> {
        self.try_get(i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, tokio_postgres::Error> {
        self.try_get(i)
    }
    fn int(&self, i: usize) -> Result<Option<i64>, tokio_postgres::Error> {
        self.try_get(i)
    }
}

/// Connects and starts the writer thread; returns its queue, its handle and the readers.
pub(in crate::store) fn start(
    target: super::PgTarget,
    batches: IntCounterVec,
    log: Logger,
) -> Result<(UnboundedSender<Op>, JoinHandle<()>, PgLedgerReads), StoreError> {
    let (tx, rx) = unbounded_channel();
    let (ready_tx, ready_rx) = sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("ledger-writer".into())
        .spawn(move || {
            let rt = match super::thread_runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let connected = async {
                    let writer = open_link(LinkKind::LedgerWriter, &target, &log).await?;
                    let reader = open_link(LinkKind::LedgerReader, &target, &log).await?;
                    Ok::<_, StoreError>((writer, reader))
                };
                match connected.await {
                    Ok((writer, reader)) => {
                        let _ = ready_tx.send(Ok(reader));
                        run(&writer, rx, (&batches, &log)).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })
        .map_err(|e| StoreError::Io(format!("spawning the ledger writer: {e}")))?;
    let reader = ready_rx
        .recv()
        .map_err(|_| StoreError::Io("the ledger writer ended while connecting".into()))??;
    Ok((tx, handle, PgLedgerReads { link: reader }))
}

/// The writer's statements, prepared once on its connection.
struct Statements {
    client: Arc<Client>,
    insert_request: Statement,
    insert_attempt: Statement,
    settle_attempt: Statement,
    complete_requests: Statement,
    prune_attempts: Statement,
    prune_requests: Statement,
}

impl Statements {
    async fn prepare(c: Arc<Client>) -> Result<Statements, tokio_postgres::Error> {
        Ok(Statements {
            insert_request: c.prepare(&sql::pg(sql::INSERT_REQUEST)).await?,
            insert_attempt: c.prepare(&sql::pg(sql::INSERT_ATTEMPT)).await?,
            settle_attempt: c.prepare(&sql::pg(sql::SETTLE_ATTEMPT)).await?,
            complete_requests: c.prepare(&sql::pg(sql::COMPLETE_REQUESTS)).await?,
            prune_attempts: c.prepare(&sql::pg(sql::PRUNE_ATTEMPTS)).await?,
            prune_requests: c.prepare(&sql::pg(sql::PRUNE_REQUESTS)).await?,
            client: c,
        })
    }
}

async fn run(
    link: &Link,
    mut rx: UnboundedReceiver<Op>,
    (batches, log): (&IntCounterVec, &Logger),
) {
    let mut prepared: Option<Statements> = None;
    while let Some(first) = rx.recv().await {
        let batch = next_batch(first, &mut rx);
        if batch.ops.is_empty() {
            batch.done();
            continue;
        }
        let applied = apply(link, &mut prepared, &batch.ops).await;
        count_batch(batches, applied.is_ok());
        if let Err(e) = applied {
            warn!(log, "ledger batch dropped"; "stage" => "ledger_batch_failed",
                "ops" => batch.ops.len(), "error" => %e);
        }
        batch.done();
    }
}

/// One batch in one transaction on the link's current connection (statements prepared again
/// after a reconnect).
async fn apply(
    link: &Link,
    prepared: &mut Option<Statements>,
    ops: &[Op],
) -> Result<(), StoreError> {
    let client = link.client()?;
    if prepared
        .as_ref()
        .is_none_or(|st| !Arc::ptr_eq(&st.client, &client))
    {
        *prepared = None;
        *prepared = Some(Statements::prepare(client.clone()).await.map_err(pg_err)?);
    }
    let Some(st) = prepared.as_ref() else {
        return Ok(());
    };
    let applied = async {
        client.batch_execute("BEGIN").await?;
        for op in ops {
            match op {
                Op::Insert(row) => insert(&client, st, row).await?,
                Op::Settle(all) => {
                    for s in all {
                        settle(&client, st, s).await?;
                    }
                }
                Op::Prune(before) => {
                    client.execute(&st.prune_attempts, &[before]).await?;
                    client.execute(&st.prune_requests, &[before]).await?;
                }
                Op::Flush(_) => {}
            }
        }
        client.batch_execute("COMMIT").await
    }
    .await;
    if let Err(e) = applied {
        rollback(&client).await;
        return Err(pg_err(e));
    }
    Ok(())
}

async fn insert(tx: &Client, st: &Statements, r: &RequestRow) -> Result<(), tokio_postgres::Error> {
    let settled = r.attempts.is_empty().then_some(r.ended_ms);
    let zero = r.attempts.is_empty().then_some(0i64);
    let added = tx
        .execute(
            &st.insert_request,
            &[
                &r.request_id,
                &r.started_ms,
                &r.ended_ms,
                &r.model,
                &r.escrow_id,
                &r.api_key_id,
                &i64::from(r.stream),
                &r.outcome,
                &i64::from(r.status),
                &r.winner_nonce.map(int),
                &zero,
                &settled,
            ],
        )
        .await?;
    if added == 0 {
        return Ok(());
    }
    for a in &r.attempts {
        tx.execute(
            &st.insert_attempt,
            &[
                &r.request_id,
                &int(a.nonce),
                &r.escrow_id,
                &a.host,
                &a.role,
                &a.result,
            ],
        )
        .await?;
    }
    Ok(())
}

async fn settle(tx: &Client, st: &Statements, s: &Settlement) -> Result<(), tokio_postgres::Error> {
    let changed = tx
        .execute(
            &st.settle_attempt,
            &[
                &s.escrow_id,
                &int(s.nonce),
                &s.inference,
                &int(s.input_tokens),
                &int(s.output_tokens),
                &int(s.reserved_cost),
                &int(s.actual_cost),
                &int(s.fee),
                &int(s.actual_cost.saturating_add(s.fee)),
                &s.settled_ms,
            ],
        )
        .await?;
    if changed > 0 {
        tx.execute(
            &st.complete_requests,
            &[&s.escrow_id, &int(s.nonce), &s.settled_ms],
        )
        .await?;
    }
    Ok(())
}

/// The ledger's reads (the readers' connection; its task runs on the writer thread).
#[derive(Debug)]
pub(in crate::store) struct PgLedgerReads {
    link: Arc<Link>,
}

impl PgLedgerReads {
    fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let client = self.link.client()?;
        futures::executor::block_on(client.query(&sql::pg(sql), params)).map_err(pg_err)
    }

    fn with_attempts(&self, row: &Row) -> Result<RequestRow, StoreError> {
        let mut r = request_row(row).map_err(pg_err)?;
        r.attempts = self
            .query(sql::ATTEMPTS, &[&r.request_id])?
            .iter()
            .map(attempt_row)
            .collect::<Result<_, _>>()
            .map_err(pg_err)?;
        Ok(r)
    }

    /// One request with its attempts.
    pub fn get(&self, request_id: &str) -> Result<Option<RequestRow>, StoreError> {
        let rows = self.query(&sql::get_request(), &[&request_id])?;
        rows.first().map(|r| self.with_attempts(r)).transpose()
    }

    /// A page of requests with their attempts.
    pub fn page(&self, range: PageRange) -> Result<Vec<RequestRow>, StoreError> {
        let (since_ms, until_ms, (after_ms, after_id), limit) = range;
        let rows = self.query(
            &sql::page(),
            &[&since_ms, &until_ms, &after_ms, &after_id, &limit],
        )?;
        rows.iter().map(|r| self.with_attempts(r)).collect()
    }

    /// Every unsettled attempt: (escrow, nonce), by escrow then nonce.
    pub fn unsettled(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = self.query(sql::UNSETTLED, &[])?;
        rows.iter()
            .map(|r| {
                let nonce = r.int(1).map_err(pg_err)?.unwrap_or(0);
                Ok((
                    r.text(0).map_err(pg_err)?,
                    u64::try_from(nonce).unwrap_or(0),
                ))
            })
            .collect()
    }
}
