//! The PostgreSQL writer task and its group commit.
//!
//! The task owns the writer's connection ([`Link`]). It waits for the first queued [`Msg`],
//! drains whatever else is queued (up to [`MAX_GROUP`] ops) without waiting, applies the group in
//! one pipelined transaction (`group.rs`) and commits once (`synchronous_commit = on`: the commit
//! returns once the WAL is flushed), then resolves each op's ack with its own result.
//!
//! The queue is bounded ([`QUEUE_BOUND`]): a write that finds it full fails at once with
//! [`Unavailable::QueueFull`] (`PgStore::submit`). While the connection is down every group fails
//! at once with [`Unavailable::Disconnected`]; the link reconnects by itself, and the statements
//! are prepared again on the new connection.
//!
//! Fencing: each append carries the lease epoch it was issued under; the group reads each
//! escrow's lease row `FOR SHARE` ([`lease::fence`]) and holds the lock until the commit, so a
//! claim by another replica waits for it and sees every diff of this group.
//!
//! No gap in a log: when a group fails, its escrows' appends of the same epoch that are still
//! queued fail alike ([`Broken`]), so a diff composed after a failed one never lands without it.
//!
//! [`lease::fence`]: super::lease::fence

use std::sync::{atomic::Ordering, Arc};

use devshard_actors::store::{StoreError, Unavailable};
use slog::{warn, Logger};
use tokio::sync::mpsc::Receiver;

use super::{
    group::{self, Broken, Statements},
    link::Link,
    MAX_GROUP,
};
use crate::store::ops::{AckTx, Counters, Msg, Op};

/// Most writes queued for the writer; one more fails with [`Unavailable::QueueFull`]. Eight
/// full groups: at the 64 streams of the benchmark the queue holds a few dozen.
pub const QUEUE_BOUND: usize = 8 * MAX_GROUP;

/// The writer's state.
pub(super) struct PgWriter {
    link: Arc<Link>,
    replica: String,
    counters: Arc<Counters>,
    log: Logger,
    /// The statements prepared on the current connection (`None` until the first group, and
    /// after the connection was lost).
    statements: Option<Statements>,
    broken: Broken,
}

impl PgWriter {
    pub fn new(link: Arc<Link>, replica: String, counters: Arc<Counters>, log: Logger) -> Self {
        PgWriter {
            link,
            replica,
            counters,
            log,
            statements: None,
            broken: Broken::new(),
        }
    }

    /// Runs until [`Msg::Shutdown`] or until every sender is gone.
    pub async fn run(mut self, mut rx: Receiver<Msg>) {
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
            return resolve_all(group, &Ok(()));
        }
        let ops: Vec<&Op> = group.iter().map(|(op, _)| op).collect();
        self.forget_respawned(&ops);
        let result = match prepared(&mut self.statements, &self.link).await {
            Ok(st) => group::run(st, &self.replica, &self.broken, &ops).await,
            Err(e) => Err(e),
        };
        let results = match result {
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

    /// An append under a newer epoch than a failed one: the escrow was respawned (it claimed
    /// again and reread its log), so its older failure no longer applies.
    fn forget_respawned(&mut self, ops: &[&Op]) {
        for op in ops {
            if let Op::AppendDiff { escrow, epoch, .. } = op {
                if self.broken.get(escrow).is_some_and(|(at, _)| at != epoch) {
                    self.broken.remove(escrow);
                }
            }
        }
    }

    fn fail_group(&mut self, group: &mut Vec<(Op, AckTx)>, e: StoreError) {
        for (op, _) in group.iter() {
            if let Op::AppendDiff { escrow, epoch, .. } = op {
                self.broken.insert(escrow.clone(), (*epoch, e.clone()));
            }
        }
        if e.is_unavailable() {
            self.statements = None;
        }
        warn!(self.log, "store group failed"; "stage" => "store_group_failed",
            "ops" => group.len(), "error" => %e);
        resolve_all(group, &Err(e));
    }
}

/// The statements of the link's current connection, prepared on first use after a (re)connect.
async fn prepared<'a>(
    slot: &'a mut Option<Statements>,
    link: &Link,
) -> Result<&'a Statements, StoreError> {
    let client = link.client()?;
    if slot
        .as_ref()
        .is_none_or(|st| !Arc::ptr_eq(&st.client, &client))
    {
        *slot = None;
        *slot = Some(Statements::prepare(client).await?);
    }
    slot.as_ref()
        .ok_or(StoreError::Unavailable(Unavailable::Disconnected))
}

fn resolve_all(group: &mut Vec<(Op, AckTx)>, result: &Result<(), StoreError>) {
    for (_, ack) in group.drain(..) {
        let _ = ack.send(result.clone());
    }
}
