//! Persistence seen from the actors: a trait, so that actors get a real SQLite store in the process
//! and an in-memory one in tests that are not about persistence.
//!
//! Two kinds of data:
//! - the **diff log** of each escrow (append-only, ordered by nonce). `append_diff` returns an
//!   [`Ack`] that resolves only once the diff is durable (fsynced). The escrow actor never lets a
//!   host see a diff before its ack resolved ("durable before visible"). Implementations may group
//!   several appends into one fsync (group commit) as long as each ack waits for its own commit.
//! - **records**: small JSON documents addressed by `(namespace, key)` — escrow registrations,
//!   host sync nonces, participant health, perf estimates, settings. `put`/`delete` also return an
//!   [`Ack`]; writes are applied in the order they were issued, across both kinds.
//!
//! Reads are synchronous and meant for start-up and respawn, not for hot paths.

mod memory;
pub mod retry;

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

pub use memory::MemoryStore;
use tokio::sync::oneshot;

use crate::protocol::{diff::Diff, warm::WarmBinding};

/// Warm-key deltas of an escrow's diff log by nonce (only nonces that bound a key).
pub type WarmDeltas = std::collections::BTreeMap<u64, Vec<WarmBinding>>;

/// Namespaces of the record store (kept in one place so names never drift).
pub mod ns {
    /// Registered escrows: key = escrow id.
    pub const ESCROWS: &str = "escrow";
    /// Per-escrow host sync nonces and other session metadata: key = escrow id.
    pub const SESSIONS: &str = "session";
    /// Participant health records: key = participant address.
    pub const PARTICIPANTS: &str = "participant";
    /// Runtime settings: key = "settings".
    pub const SETTINGS: &str = "settings";
    /// The payload of a nonce awaiting a refused-timeout vote (the vote needs it, and a restart
    /// would otherwise lose it): key = `<escrow id>/<nonce>`, deleted once the nonce is settled.
    pub const TIMEOUT_PAYLOADS: &str = "timeout_payload";
    /// The newest state checkpoint of an escrow (`escrow/session/checkpoint.rs`): key = escrow
    /// id.
    pub const CHECKPOINTS: &str = "checkpoint";
}

/// Errors of the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("store i/o: {0}")]
    Io(String),
    #[error("store data is corrupt: {0}")]
    Corrupt(String),
    #[error("diff nonce {got} does not follow {last} in the log of escrow {escrow}")]
    OutOfOrder { escrow: String, last: u64, got: u64 },
    #[error("the store is closed")]
    Closed,
    /// This replica no longer holds the lease epoch it appended under: another replica took the
    /// escrow over, and nothing of the append was written (fenced).
    #[error("escrow {escrow}: lease epoch {epoch} is no longer held by this replica")]
    LeaseLost { escrow: String, epoch: u64 },
    /// Another replica holds the escrow's lease and it has not expired.
    #[error("escrow {escrow} is leased to replica {owner} until it expires")]
    LeaseHeld { escrow: String, owner: String },
    /// The database cannot take the operation now; it passes by itself (the store reconnects),
    /// so callers answer "retry later" and do not count it as a failure of their own.
    #[error("the database is unavailable ({0}); retry shortly")]
    Unavailable(Unavailable),
}

impl StoreError {
    /// Whether this is [`StoreError::Unavailable`], which passes once the database is back.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// Why the database is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The connection is down (server stopped or restarting, network): reconnecting. Nothing of
    /// the operation was written.
    #[error("connection lost; reconnecting")]
    Disconnected,
    /// The connection broke while the `COMMIT` was in flight: the write may or may not have
    /// landed. Treated as failed; the escrow rereads its log before it sequences again.
    #[error("connection lost during COMMIT; outcome unknown")]
    CommitUnknown,
    /// The writer's queue is full (the database is slower than the load): nothing was queued.
    #[error("the store's write queue is full")]
    QueueFull,
}

/// Resolves when a write is durable (or failed).
#[derive(Debug)]
pub struct Ack(AckInner);

#[derive(Debug)]
enum AckInner {
    Ready(Option<Result<(), StoreError>>),
    Pending(oneshot::Receiver<Result<(), StoreError>>),
}

impl Ack {
    /// An ack that is already resolved (in-memory stores, validation errors).
    pub fn ready(result: Result<(), StoreError>) -> Ack {
        Ack(AckInner::Ready(Some(result)))
    }

    /// An ack resolved later through the returned sender.
    pub fn channel() -> (oneshot::Sender<Result<(), StoreError>>, Ack) {
        let (tx, rx) = oneshot::channel();
        (tx, Ack(AckInner::Pending(rx)))
    }
}

impl Future for Ack {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            AckInner::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(StoreError::Closed))),
            AckInner::Pending(rx) => match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(r)) => Poll::Ready(r),
                Poll::Ready(Err(_)) => Poll::Ready(Err(StoreError::Closed)),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// The persistence the actors need.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Appends one diff to an escrow's log. Nonces must be strictly increasing per escrow.
    fn append_diff(&self, escrow_id: &str, diff: &Diff) -> Ack {
        self.append_diff_with_warm(escrow_id, diff, &[])
    }
    /// Appends one diff with the warm keys its application bound (docs/lifecycle.md §5), in the same
    /// write, so a replay restores the bindings without asking the chain.
    fn append_diff_with_warm(
        &self,
        escrow_id: &str,
        diff: &Diff,
        warm_delta: &[WarmBinding],
    ) -> Ack;
    /// The warm-key deltas stored with an escrow's diffs.
    fn load_warm_deltas(&self, escrow_id: &str) -> Result<WarmDeltas, StoreError>;
    /// The whole diff log of an escrow, in nonce order.
    fn load_diffs(&self, escrow_id: &str) -> Result<Vec<Diff>, StoreError>;
    /// Diffs with `nonce >= from`, in nonce order.
    fn load_diffs_from(&self, escrow_id: &str, from: u64) -> Result<Vec<Diff>, StoreError>;
    /// Diffs with `from <= nonce <= to`, in nonce order (a host far behind needs a part of the
    /// log, not all of it to the tip: `escrow/diff_log.rs`).
    fn load_diffs_range(
        &self,
        escrow_id: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<Diff>, StoreError> {
        let mut diffs = self.load_diffs_from(escrow_id, from)?;
        diffs.retain(|d| d.nonce <= to);
        Ok(diffs)
    }
    /// Removes an escrow's diff log (escrow deleted by an operator).
    fn delete_diffs(&self, escrow_id: &str) -> Ack;
    /// Upserts a record.
    fn put(&self, namespace: &str, key: &str, value: serde_json::Value) -> Ack;
    /// Deletes a record (no-op when absent).
    fn delete(&self, namespace: &str, key: &str) -> Ack;
    /// One record.
    fn get(&self, namespace: &str, key: &str) -> Result<Option<serde_json::Value>, StoreError>;
    /// Every record of a namespace, ordered by key.
    fn list(&self, namespace: &str) -> Result<Vec<(String, serde_json::Value)>, StoreError>;
    /// Waits until every write issued so far is durable (graceful shutdown).
    fn flush(&self) -> Ack;
    /// Takes the exclusive right to append to an escrow's diff log before its log is read, when
    /// several replicas share one database (fenced lease; see the PostgreSQL store). A store that
    /// one process owns holds every escrow already.
    fn claim_escrow(&self, escrow_id: &str) -> Result<(), StoreError> {
        let _ = escrow_id;
        Ok(())
    }
    /// Whether this replica holds the lease `id` (an escrow's, or a one-replica duty's such as
    /// rotation's) as far as it knows. A store that one process owns holds every lease.
    fn holds_lease(&self, id: &str) -> bool {
        let _ = id;
        true
    }
    /// Upserts a record only while this replica still holds the lease `lease` at the epoch it
    /// claimed, checked in the transaction that writes it; otherwise the ack fails with
    /// [`StoreError::LeaseLost`] and nothing is written. A store that one process owns writes it
    /// as [`Store::put`] does.
    fn put_fenced(&self, lease: &str, namespace: &str, key: &str, value: serde_json::Value) -> Ack {
        let _ = lease;
        self.put(namespace, key, value)
    }
    /// This replica, when several share the store (`None`: this process holds every escrow, and
    /// the directory plans no ownership).
    fn replica(&self) -> Option<ReplicaIdentity> {
        None
    }
    /// The live replicas and every escrow lease, by the database's clock (empty when the store
    /// is not shared).
    fn replica_view(&self) -> Result<ReplicaView, StoreError> {
        Ok(ReplicaView::default())
    }
    /// Gives one escrow's lease up at once (its actor stopped and its writes are durable), so
    /// another replica can claim it without waiting for the expiry.
    fn release_escrow(&self, escrow_id: &str) -> Result<(), StoreError> {
        let _ = escrow_id;
        Ok(())
    }
    /// The directory finished an ownership round (readiness waits for the first one).
    fn ownership_round_done(&self) {}
}

/// Who this replica is among those sharing one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaIdentity {
    pub id: String,
    /// How long a lease (and a replica's heartbeat) lasts without renewal.
    pub lease_ttl: std::time::Duration,
}

/// One escrow's lease as the shared store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    pub escrow_id: String,
    pub owner: String,
    pub epoch: u64,
    /// Milliseconds until it expires, by the database's clock (`<= 0`: expired or released).
    pub expires_in_ms: i64,
}

/// The replicas sharing the store and the escrows' leases, read together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaView {
    /// Replicas whose heartbeat has not expired, sorted.
    pub live_replicas: Vec<String>,
    /// Milliseconds until the first heartbeat of another live replica expires (when the shares
    /// change if that replica died).
    pub next_heartbeat_expiry_ms: Option<i64>,
    pub leases: Vec<LeaseView>,
}

/// A store shared by every actor.
pub type SharedStore = std::sync::Arc<dyn Store>;
