//! The writes both stores' writers take: encoded on the caller's thread, applied in issue order
//! by one writer (SQLite's `writer.rs`, PostgreSQL's `postgres/writer.rs`), each acked once the
//! transaction holding it has committed.

use std::sync::atomic::AtomicU64;

use devshard_actors::store::StoreError;
use tokio::sync::oneshot;

use super::codec::DiffRow;

/// Resolves one op's [`devshard_actors::store::Ack`].
pub(crate) type AckTx = oneshot::Sender<Result<(), StoreError>>;

/// One write, already encoded on the caller's thread.
#[derive(Debug)]
pub(crate) enum Op {
    AppendDiff {
        escrow: String,
        /// The lease epoch the append was issued under: PostgreSQL fences the append with it
        /// (`postgres/lease.rs`); SQLite, one process without leases, ignores it.
        epoch: u64,
        row: DiffRow,
    },
    DeleteDiffs {
        escrow: String,
    },
    Put {
        namespace: String,
        key: String,
        json: String,
        updated_ms: i64,
        /// `(lease, epoch)`: PostgreSQL writes the record only while this replica holds that
        /// lease epoch (`Store::put_fenced`); SQLite ignores it.
        fence: Option<(String, u64)>,
    },
    Delete {
        namespace: String,
        key: String,
    },
    /// Writes nothing: resolves once everything queued before it has committed.
    Flush,
}

/// What goes through the writer's channel.
#[derive(Debug)]
pub(crate) enum Msg {
    Write(Op, AckTx),
    /// Commit everything queued before, then stop.
    Shutdown,
}

/// Group-commit counters, read by `stats()`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub groups: AtomicU64,
    pub ops: AtomicU64,
    pub last_group: AtomicU64,
}

impl Op {
    /// Upserts the record `(namespace, key)` (its JSON encoded here, on the caller's thread).
    pub(crate) fn put(
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
    ) -> Result<Op, StoreError> {
        Op::put_fenced(namespace, key, value, None)
    }

    /// [`Op::put`] written only under the lease epoch `fence` (PostgreSQL; `None`: always).
    pub(crate) fn put_fenced(
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
        fence: Option<(String, u64)>,
    ) -> Result<Op, StoreError> {
        super::codec::encode_value(value).map(|json| Op::Put {
            namespace: namespace.to_string(),
            key: key.to_string(),
            json,
            updated_ms: super::codec::now_ms(),
            fence,
        })
    }

    /// Deletes the record `(namespace, key)`.
    pub(crate) fn delete(namespace: &str, key: &str) -> Op {
        Op::Delete {
            namespace: namespace.to_string(),
            key: key.to_string(),
        }
    }

    /// Removes an escrow's diff log.
    pub(crate) fn delete_diffs(escrow_id: &str) -> Op {
        Op::DeleteDiffs {
            escrow: escrow_id.to_string(),
        }
    }
}
