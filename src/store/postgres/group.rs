//! One group of writes as one pipelined transaction, in two round trips plus the commit.
//!
//! tokio-postgres pipelines the requests of futures polled together on one connection: they are
//! sent in the order first polled and answered in that order. A group therefore runs as
//! 1. `BEGIN`, then, per escrow appended to (and per lease a fenced record write names), its
//!    lease row read `FOR SHARE` (the fence) and its last nonce — all sent at once;
//! 2. [`decide`] (pure) settles each op in issue order: refused (lease lost, nonce not after the
//!    last, an earlier append of the same epoch failed) or written;
//! 3. every write, then `COMMIT` — all sent at once. A failed statement aborts the transaction in
//!    PostgreSQL, so the pipelined `COMMIT` rolls back and the whole group fails; a connection
//!    lost in this phase leaves the commit's outcome unknown ([`Unavailable::CommitUnknown`]).
//!
//! Statements are prepared once per connection ([`Statements`]).

use std::{collections::HashMap, sync::Arc};

use devshard_actors::store::{StoreError, Unavailable};
use futures::{future::LocalBoxFuture, TryStreamExt};
use tokio_postgres::{types::ToSql, Client, Row, Statement};

use super::{
    lease::{self, LeaseRow},
    link::rollback,
    pg_err,
};
use crate::store::ops::Op;

/// The writer's statements, prepared on one connection.
pub(super) struct Statements {
    pub client: Arc<Client>,
    fence: Statement,
    last_nonce: Statement,
    insert_diff: Statement,
    delete_diffs: Statement,
    put: Statement,
    delete: Statement,
}

impl Statements {
    /// Prepares every statement on `client` (pipelined).
    pub async fn prepare(client: Arc<Client>) -> Result<Statements, StoreError> {
        let fence_sql = lease::select_locked("FOR SHARE");
        let (fence, last_nonce, insert_diff, delete_diffs, put, delete) = futures::try_join!(
            client.prepare(&fence_sql),
            client.prepare("SELECT MAX(nonce) FROM diffs WHERE escrow_id = $1"),
            client.prepare(
                "INSERT INTO diffs \
                 (escrow_id, nonce, txs, user_sig, post_state_root, warm_delta) \
                 VALUES ($1, $2, $3, $4, $5, $6)"
            ),
            client.prepare("DELETE FROM diffs WHERE escrow_id = $1"),
            client.prepare(
                "INSERT INTO records (namespace, key, value, updated_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, key) \
                 DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms"
            ),
            client.prepare("DELETE FROM records WHERE namespace = $1 AND key = $2"),
        )
        .map_err(pg_err)?;
        Ok(Statements {
            client,
            fence,
            last_nonce,
            insert_diff,
            delete_diffs,
            put,
            delete,
        })
    }
}

/// What the group's reads found for an escrow appended to: its lease row and last nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EscrowView {
    pub lease: Option<LeaseRow>,
    pub last_nonce: u64,
}

/// Escrows whose append failed at an epoch, with the error: later appends of that escrow under
/// the same epoch were composed after a diff that may be missing, so they fail alike (the escrow
/// stops, and its respawn claims a new epoch and rereads the log).
pub(super) type Broken = HashMap<String, (u64, StoreError)>;

/// Each op's fate, in issue order: `Ok(true)` written, `Ok(false)` nothing to write (a flush),
/// `Err` refused (nothing written). Pure.
pub(super) fn decide(
    ops: &[&Op],
    replica: &str,
    views: &HashMap<&str, EscrowView>,
    broken: &Broken,
) -> Vec<Result<bool, StoreError>> {
    let mut last: HashMap<&str, u64> = views.iter().map(|(e, v)| (*e, v.last_nonce)).collect();
    ops.iter()
        .map(|op| match op {
            Op::AppendDiff { escrow, epoch, row } => {
                if let Some((_, e)) = broken.get(escrow).filter(|(at, _)| at == epoch) {
                    return Err(e.clone());
                }
                let lease = views.get(escrow.as_str()).and_then(|v| v.lease.as_ref());
                lease::fence(lease, replica, escrow, *epoch)?;
                let prev = last.get(escrow.as_str()).copied().unwrap_or(0);
                let got = u64::try_from(row.nonce).unwrap_or(0);
                if got <= prev {
                    return Err(StoreError::OutOfOrder {
                        escrow: escrow.clone(),
                        last: prev,
                        got,
                    });
                }
                last.insert(escrow, got);
                Ok(true)
            }
            Op::DeleteDiffs { escrow } => {
                last.insert(escrow, 0);
                Ok(true)
            }
            Op::Put {
                fence: Some((lease, epoch)),
                ..
            } => {
                let row = views.get(lease.as_str()).and_then(|v| v.lease.as_ref());
                lease::fence(row, replica, lease, *epoch)?;
                Ok(true)
            }
            Op::Put { .. } | Op::Delete { .. } => Ok(true),
            Op::Flush => Ok(false),
        })
        .collect()
}

type Pipelined<'a, T> = LocalBoxFuture<'a, Result<T, tokio_postgres::Error>>;

/// Runs a group in one transaction and commits it; each op's own result, or the error that
/// failed them all (nothing committed, or [`Unavailable::CommitUnknown`]).
pub(super) async fn run(
    st: &Statements,
    replica: &str,
    broken: &Broken,
    ops: &[&Op],
) -> Result<Vec<Result<(), StoreError>>, StoreError> {
    let client = &*st.client;
    // Every lease the group is fenced by: the escrows appended to, and the leases of fenced
    // record writes (`Store::put_fenced`: a duty's, or a settling escrow's).
    let mut escrows: Vec<&str> = Vec::new();
    for op in ops {
        let lease = match op {
            Op::AppendDiff { escrow, .. } => escrow.as_str(),
            Op::Put {
                fence: Some((lease, _)),
                ..
            } => lease.as_str(),
            _ => continue,
        };
        if !escrows.contains(&lease) {
            escrows.push(lease);
        }
    }
    let mut reads: Vec<Pipelined<'_, Vec<Row>>> = vec![Box::pin(async {
        client.batch_execute("BEGIN").await.map(|()| Vec::new())
    })];
    for e in &escrows {
        reads.push(query(client, &st.fence, e));
        reads.push(query(client, &st.last_nonce, e));
    }
    let rows = match futures::future::try_join_all(reads).await {
        Ok(rows) => rows,
        Err(e) => {
            rollback(client).await;
            return Err(pg_err(e));
        }
    };
    // After BEGIN's (empty) answer: each escrow's lease rows, then its last-nonce row.
    let mut answers = rows.iter().skip(1);
    let mut views = HashMap::new();
    for e in &escrows {
        let lease = answers.next().and_then(|r| r.first()).map(lease::lease_row);
        let max: Option<i64> = answers
            .next()
            .and_then(|r| r.first())
            .and_then(|row| row.get(0));
        let last_nonce = u64::try_from(max.unwrap_or(0)).unwrap_or(0);
        views.insert(*e, EscrowView { lease, last_nonce });
    }
    let decided = decide(ops, replica, &views, broken);
    let mut writes: Vec<Pipelined<'_, u64>> = apply_order(ops)
        .into_iter()
        .filter(|&i| matches!(decided[i], Ok(true)))
        .map(|i| write(st, ops[i]))
        .collect();
    writes.push(Box::pin(async {
        client.batch_execute("COMMIT").await.map(|()| 0)
    }));
    if let Err(e) = futures::future::try_join_all(writes).await {
        rollback(client).await;
        return Err(match pg_err(e) {
            StoreError::Unavailable(_) => StoreError::Unavailable(Unavailable::CommitUnknown),
            e => StoreError::Io(format!("group rolled back: {e}")),
        });
    }
    Ok(decided.into_iter().map(|d| d.map(|_| ())).collect())
}

/// The order a group's writes run in: the diff ops as issued, then the record writes sorted by
/// `(namespace, key)` (one key's writes keep their issue order). The transaction commits them
/// together, so only each key's last write shows; the sorted order means two replicas' groups
/// writing the same records (participant health) lock them in one order and cannot deadlock
/// (`40P01`, seen in the failover test before).
fn apply_order(ops: &[&Op]) -> Vec<usize> {
    let mut records: Vec<((&str, &str), usize)> = Vec::new();
    let mut order = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Put { namespace, key, .. } | Op::Delete { namespace, key } => {
                records.push(((namespace.as_str(), key.as_str()), i));
            }
            _ => order.push(i),
        }
    }
    records.sort();
    order.extend(records.into_iter().map(|(_, i)| i));
    order
}

fn query<'a>(client: &'a Client, st: &'a Statement, escrow: &'a str) -> Pipelined<'a, Vec<Row>> {
    Box::pin(async move { client.query_raw(st, [escrow]).await?.try_collect().await })
}

/// The statement writing `op` (never a flush: it writes nothing).
fn write<'a>(st: &'a Statements, op: &'a Op) -> Pipelined<'a, u64> {
    let (statement, params): (&Statement, Vec<&(dyn ToSql + Sync)>) = match op {
        Op::AppendDiff { escrow, row, .. } => (
            &st.insert_diff,
            vec![
                escrow,
                &row.nonce,
                &row.txs,
                &row.user_sig,
                &row.post_state_root,
                &row.warm_delta,
            ],
        ),
        Op::DeleteDiffs { escrow } => (&st.delete_diffs, vec![escrow]),
        Op::Put {
            namespace,
            key,
            json,
            updated_ms,
            ..
        } => (&st.put, vec![namespace, key, json, updated_ms]),
        Op::Delete { namespace, key } => (&st.delete, vec![namespace, key]),
        Op::Flush => return Box::pin(async { Ok(0) }),
    };
    Box::pin(st.client.execute_raw(statement, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::codec::DiffRow;

    fn append(escrow: &str, epoch: u64, nonce: i64) -> Op {
        Op::AppendDiff {
            escrow: escrow.into(),
            epoch,
            row: DiffRow {
                nonce,
                txs: Vec::new(),
                user_sig: Vec::new(),
                post_state_root: Vec::new(),
                warm_delta: None,
            },
        }
    }

    fn view(owner: &str, epoch: u64, last_nonce: u64) -> EscrowView {
        EscrowView {
            lease: Some(LeaseRow {
                owner: owner.into(),
                epoch,
                expired: false,
            }),
            last_nonce,
        }
    }

    #[test]
    fn appends_follow_the_log_and_the_lease_in_issue_order() {
        let ops = [
            append("a", 2, 5),
            append("a", 2, 6),
            append("a", 2, 6),
            append("b", 1, 1),
            Op::Flush,
            Op::DeleteDiffs { escrow: "a".into() },
            append("a", 2, 1),
        ];
        let refs: Vec<&Op> = ops.iter().collect();
        let views = HashMap::from([("a", view("me", 2, 4)), ("b", view("other", 3, 0))]);
        let d = decide(&refs, "me", &views, &Broken::new());
        assert_eq!(d[0], Ok(true));
        assert_eq!(d[1], Ok(true));
        assert_eq!(
            d[2],
            Err(StoreError::OutOfOrder {
                escrow: "a".into(),
                last: 6,
                got: 6
            })
        );
        assert_eq!(
            d[3],
            Err(StoreError::LeaseLost {
                escrow: "b".into(),
                epoch: 1
            })
        );
        assert_eq!(d[4], Ok(false));
        assert_eq!(d[5], Ok(true));
        assert_eq!(d[6], Ok(true));
    }

    #[test]
    fn record_writes_run_after_the_diffs_sorted_by_key_in_issue_order_per_key() {
        let put = |ns: &str, key: &str| Op::Put {
            namespace: ns.into(),
            key: key.into(),
            json: "{}".into(),
            updated_ms: 0,
            fence: None,
        };
        let ops = [
            put("participant", "b"),
            append("e", 1, 1),
            put("participant", "a"),
            put("participant", "b"),
            Op::DeleteDiffs { escrow: "x".into() },
        ];
        let refs: Vec<&Op> = ops.iter().collect();
        assert_eq!(apply_order(&refs), vec![1, 4, 2, 0, 3]);
    }

    #[test]
    fn a_fenced_record_write_needs_its_lease_epoch() {
        let put = |epoch| Op::Put {
            namespace: "n".into(),
            key: "k".into(),
            json: "{}".into(),
            updated_ms: 0,
            fence: Some(("__rotation".into(), epoch)),
        };
        let (held, stale) = (put(4), put(3));
        let views = HashMap::from([("__rotation", view("me", 4, 0))]);
        let d = decide(&[&held, &stale], "me", &views, &Broken::new());
        assert_eq!(d[0], Ok(true));
        assert!(matches!(d[1], Err(StoreError::LeaseLost { .. })), "{d:?}");
    }

    #[test]
    fn an_append_after_a_failed_one_of_the_same_epoch_fails_alike() {
        let unknown = StoreError::Unavailable(Unavailable::CommitUnknown);
        let broken = Broken::from([("a".to_string(), (2, unknown.clone()))]);
        let views = HashMap::from([("a", view("me", 3, 4))]);
        let (stale, respawned) = (append("a", 2, 6), append("a", 3, 5));
        let d = decide(&[&stale, &respawned], "me", &views, &broken);
        // The respawned escrow (new epoch) resumes after the log; the stale one fails.
        assert_eq!(d, vec![Err(unknown), Ok(true)]);
    }
}
