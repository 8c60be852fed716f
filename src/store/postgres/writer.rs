//! The PostgreSQL writer task and its group commit.
//!
//! The task owns the only writing connection. It waits for the first queued [`Msg`], drains
//! whatever else is queued (up to [`MAX_GROUP`] ops) without waiting, applies the group in one
//! transaction and commits once (`synchronous_commit = on`: the commit returns once the WAL is
//! flushed), then resolves each op's ack with its own result. Ops are checked before any SQL runs
//! (lease fence, nonce order), so a refused op writes nothing and fails alone; an SQL error aborts
//! the transaction in PostgreSQL, so it fails the whole group and drops the caches.
//!
//! Fencing: each append carries the lease epoch it was issued under. The first append of an
//! escrow in a group reads its lease row `FOR SHARE` ([`lease::fence`]); the lock is held until
//! the commit, so a claim by another replica waits for it and sees every diff of this group.

use std::{
    collections::HashMap,
    sync::{atomic::Ordering, Arc},
};

use devshard_actors::store::StoreError;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::{Client, Transaction};

use super::{lease, pg_err, MAX_GROUP};
use crate::store::ops::{AckTx, Counters, Msg, Op};

/// The writer's state.
pub(super) struct PgWriter {
    pub client: Client,
    pub replica: String,
    pub counters: Arc<Counters>,
    /// Per escrow: the epoch the cached last nonce was read under, and that nonce.
    last_nonce: HashMap<String, (u64, u64)>,
}

impl PgWriter {
    pub fn new(client: Client, replica: String, counters: Arc<Counters>) -> PgWriter {
        PgWriter {
            client,
            replica,
            counters,
            last_nonce: HashMap::new(),
        }
    }

    /// Runs until [`Msg::Shutdown`] or until every sender is gone.
    pub async fn run(mut self, mut rx: UnboundedReceiver<Msg>) {
        let mut group: Vec<(Op, AckTx)> = Vec::with_capacity(MAX_GROUP);
        let mut stop = false;
        while !stop {
            match rx.recv().await {
                Some(Msg::Write(op, ack)) => group.push((op, ack)),
                Some(Msg::Shutdown) | None => break,
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
            self.commit_group(&mut group).await;
        }
    }

    async fn commit_group(&mut self, group: &mut Vec<(Op, AckTx)>) {
        let writes = group
            .iter()
            .filter(|(op, _)| !matches!(op, Op::Flush))
            .count();
        if writes == 0 {
            resolve_all(group, &Ok(()));
            return;
        }
        let results =
            match run_group(&mut self.client, &self.replica, &mut self.last_nonce, group).await {
                Ok(results) => results,
                Err(e) => return self.fail_group(group, e),
            };
        let committed = results.iter().zip(group.iter());
        let committed = committed
            .filter(|(r, (op, _))| r.is_ok() && !matches!(op, Op::Flush))
            .count() as u64;
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        self.counters.ops.fetch_add(committed, Ordering::Relaxed);
        self.counters
            .last_group
            .store(writes as u64, Ordering::Relaxed);
        for ((_, ack), result) in group.drain(..).zip(results) {
            let _ = ack.send(result);
        }
    }

    fn fail_group(&mut self, group: &mut Vec<(Op, AckTx)>, e: StoreError) {
        self.last_nonce.clear();
        resolve_all(group, &Err(e));
    }
}

/// Applies a group in one transaction and commits it; each op's own result, or the error that
/// failed them all.
async fn run_group(
    client: &mut Client,
    replica: &str,
    last_nonce: &mut HashMap<String, (u64, u64)>,
    group: &[(Op, AckTx)],
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let tx = client.transaction().await.map_err(pg_err)?;
    let mut fenced: HashMap<String, Result<(), StoreError>> = HashMap::new();
    let mut results = vec![Ok(()); group.len()];
    for i in apply_order(group) {
        results[i] = apply(&tx, replica, last_nonce, &mut fenced, &group[i].0)
            .await
            .map_err(|e| StoreError::Io(format!("group rolled back: {}", pg_err(e))))?;
    }
    tx.commit().await.map_err(pg_err)?;
    Ok(results)
}

/// The order a group's ops run in: the diff ops as issued, then the record writes sorted by
/// `(namespace, key)` (one key's writes keep their issue order). The transaction commits them
/// together, so only each key's last write shows; the sorted order means two replicas' groups
/// writing the same records (participant health) lock them in one order and cannot deadlock.
fn apply_order(group: &[(Op, AckTx)]) -> Vec<usize> {
    let record = |op: &Op| match op {
        Op::Put { namespace, key, .. } | Op::Delete { namespace, key } => {
            Some((namespace.clone(), key.clone()))
        }
        _ => None,
    };
    let mut records: Vec<((String, String), usize)> = Vec::new();
    let mut order = Vec::with_capacity(group.len());
    for (i, (op, _)) in group.iter().enumerate() {
        match record(op) {
            Some(k) => records.push((k, i)),
            None => order.push(i),
        }
    }
    records.sort();
    order.extend(records.into_iter().map(|(_, i)| i));
    order
}

/// Applies one op. The outer error is an SQL failure (the transaction is aborted); the inner one
/// is this op's refusal (nothing written).
async fn apply(
    tx: &Transaction<'_>,
    replica: &str,
    last_nonce: &mut HashMap<String, (u64, u64)>,
    fenced: &mut HashMap<String, Result<(), StoreError>>,
    op: &Op,
) -> Result<Result<(), StoreError>, tokio_postgres::Error> {
    match op {
        Op::AppendDiff { escrow, epoch, row } => {
            let fence = match fenced.get(escrow) {
                Some(f) => f.clone(),
                None => {
                    let lease = lease::read_locked(tx, escrow, "FOR SHARE").await?;
                    let f = lease::fence(lease.as_ref(), replica, escrow, *epoch);
                    fenced.insert(escrow.clone(), f.clone());
                    f
                }
            };
            if let Err(e) = fence {
                last_nonce.remove(escrow);
                return Ok(Err(e));
            }
            let last = match last_nonce.get(escrow) {
                Some((e, n)) if e == epoch => *n,
                _ => {
                    let max: Option<i64> = tx
                        .query_one(
                            "SELECT MAX(nonce) FROM diffs WHERE escrow_id = $1",
                            &[escrow],
                        )
                        .await?
                        .get(0);
                    u64::try_from(max.unwrap_or(0)).unwrap_or(0)
                }
            };
            let got = u64::try_from(row.nonce).unwrap_or(0);
            if got <= last {
                last_nonce.insert(escrow.clone(), (*epoch, last));
                return Ok(Err(StoreError::OutOfOrder {
                    escrow: escrow.clone(),
                    last,
                    got,
                }));
            }
            tx.execute(
                "INSERT INTO diffs \
                 (escrow_id, nonce, txs, user_sig, post_state_root, warm_delta) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    escrow,
                    &row.nonce,
                    &row.txs,
                    &row.user_sig,
                    &row.post_state_root,
                    &row.warm_delta,
                ],
            )
            .await?;
            last_nonce.insert(escrow.clone(), (*epoch, got));
        }
        Op::DeleteDiffs { escrow } => {
            tx.execute("DELETE FROM diffs WHERE escrow_id = $1", &[escrow])
                .await?;
            last_nonce.remove(escrow);
        }
        Op::Put {
            namespace,
            key,
            json,
            updated_ms,
        } => {
            tx.execute(
                "INSERT INTO records (namespace, key, value, updated_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, key) \
                 DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms",
                &[namespace, key, json, updated_ms],
            )
            .await?;
        }
        Op::Delete { namespace, key } => {
            tx.execute(
                "DELETE FROM records WHERE namespace = $1 AND key = $2",
                &[namespace, key],
            )
            .await?;
        }
        Op::Flush => {}
    }
    Ok(Ok(()))
}

fn resolve_all(group: &mut Vec<(Op, AckTx)>, result: &Result<(), StoreError>) {
    for (_, ack) in group.drain(..) {
        let _ = ack.send(result.clone());
    }
}
