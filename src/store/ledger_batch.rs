//! The cost ledger's write batches: the ops the writer thread drains ([`Op`]), grouped into one
//! transaction of at most [`MAX_BATCH`] rows ([`next_batch`], the same for SQLite and
//! PostgreSQL), and the metric of their ends.

use std::sync::mpsc::Sender;

use devshard_actors::store::StoreError;
use prometheus::{IntCounterVec, Opts};
use tokio::sync::mpsc::{error::TryRecvError, UnboundedReceiver};

use super::ledger::{RequestRow, Settlement, MAX_BATCH};

pub(super) enum Op {
    Insert(Box<RequestRow>),
    Settle(Vec<Settlement>),
    Prune(i64),
    Flush(Sender<()>),
}

impl Op {
    /// The rows it writes, which a batch counts against [`MAX_BATCH`].
    fn weight(&self) -> usize {
        match self {
            Op::Settle(s) => s.len().max(1),
            _ => 1,
        }
    }
}

/// Settlements as ops of at most [`MAX_BATCH`] rows each. The ledger shares the SQLite file with
/// the escrows' diff logs: one transaction of every settlement held its write lock for seconds
/// (the rotating hour-long run: 442 517 at once after the final escrows settled, and an escrow's
/// durable write waited the 5 s busy timeout and failed with "database is locked").
///
/// Each op owns a vector of its own size. Splitting the queue with `split_off` left every chunk
/// with the capacity of everything after it: the rotating hour-long run's gateway settled
/// 487 429 nonces after its last restart and grew from 241 MB to 23 GB in a minute, until the
/// kernel killed it.
pub(super) fn settle_ops(settled: Vec<Settlement>) -> Vec<Op> {
    let mut ops = Vec::with_capacity(settled.len().div_ceil(MAX_BATCH));
    let mut rest = settled.into_iter().peekable();
    while rest.peek().is_some() {
        let chunk: Vec<Settlement> = rest.by_ref().take(MAX_BATCH).collect();
        ops.push(Op::Settle(chunk));
    }
    ops
}

/// Batches ended, by `result`: `committed`, `dropped` (the database refused the transaction).
pub(super) fn batch_counter() -> Result<IntCounterVec, StoreError> {
    let c = IntCounterVec::new(
        Opts::new(
            "ledger_batches_total",
            "Cost ledger write batches, committed or dropped",
        ),
        &["result"],
    )
    .map_err(|e| StoreError::Io(format!("ledger metrics: {e}")))?;
    for r in ["committed", "dropped"] {
        c.with_label_values(&[r]);
    }
    Ok(c)
}

/// Counts one batch's end.
pub(super) fn count_batch(batches: &IntCounterVec, committed: bool) {
    let result = if committed { "committed" } else { "dropped" };
    batches.with_label_values(&[result]).inc();
}

/// Queued ops up to [`MAX_BATCH`] rows, `first` included, applied in one transaction; then
/// [`Batch::done`] answers the flushes among them.
pub(super) struct Batch {
    pub ops: Vec<Op>,
    flushed: Vec<Sender<()>>,
}

/// Takes `first` and whatever else is queued, without waiting.
pub(super) fn next_batch(first: Op, rx: &mut UnboundedReceiver<Op>) -> Batch {
    let mut batch = Batch {
        ops: Vec::new(),
        flushed: Vec::new(),
    };
    let mut next = Ok(first);
    let mut weight = 0;
    while let Ok(op) = next {
        weight += op.weight();
        match op {
            Op::Flush(done) => batch.flushed.push(done),
            op => batch.ops.push(op),
        }
        if weight >= MAX_BATCH {
            break;
        }
        next = rx.try_recv();
        if matches!(next, Err(TryRecvError::Disconnected)) {
            break;
        }
    }
    batch
}

impl Batch {
    /// Answers the flushes (after the commit).
    pub fn done(self) {
        for d in self.flushed {
            let _ = d.send(());
        }
    }
}

#[cfg(test)]
#[path = "ledger_batch_tests.rs"]
mod tests;
