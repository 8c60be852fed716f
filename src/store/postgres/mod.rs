//! The PostgreSQL implementation of [`devshard_actors::store::Store`], for several replicas on
//! one database.
//!
//! # Threads and connections
//! One thread, `store-postgres`, owns a current-thread tokio runtime and three connections:
//! the writer's (group commit, `writer.rs`), the readers' and the leases'. Callers never enter
//! that runtime: writes go through a bounded channel to the writer task, and reads and lease
//! claims await the connection's request channel with `futures::executor::block_on` on the
//! calling thread (tokio-postgres clients are runtime-agnostic; only their connections run on
//! the store's runtime). Reads are meant for start-up and respawn, as with SQLite.
//!
//! # Database outages
//! Each connection reconnects by itself (`link.rs`, back-off 100 ms doubling to 2 s). While one
//! is down, every operation on it fails at once with [`StoreError::Unavailable`]; so does a write
//! that finds the writer's queue full ([`writer::QUEUE_BOUND`]). A write whose `COMMIT` was in
//! flight when the connection broke fails with [`Unavailable::CommitUnknown`]: it may have
//! landed; the escrow stops and its respawn rereads the log, so its nonce is neither lost nor
//! reused.
//!
//! # Durability contract
//! As the SQLite store's: an ack resolves after the `COMMIT` (`synchronous_commit = on`) of the
//! transaction holding the write; writes apply in issue order; a failed ack means nothing of that
//! write landed, except [`Unavailable::CommitUnknown`] (see above). An append is also refused with [`StoreError::LeaseLost`] unless this replica
//! still holds the escrow's lease at the epoch it claimed (`lease.rs`).
//!
//! # Leases
//! [`Store::claim_escrow`] takes an escrow's lease (before its log is read); a task renews held
//! leases and this replica's heartbeat row every TTL/3 and forgets the leases it lost;
//! [`Store::release_escrow`] gives one up (handoff); [`PgStore::close`] releases them all and
//! deletes the heartbeat row. Which escrows to claim or release is the directory's ownership
//! loop (`devshard_actors::directory::ownership`), planned from [`Store::replica_view`].

mod binding;
pub mod budgets;
mod group;
pub mod lease;
pub(crate) mod ledger;
mod link;
pub mod readiness;
mod renewals;
pub mod replicas;
pub(crate) mod schema;
mod store_trait;
pub mod target;
pub mod tls;
mod verify;
mod writer;

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{sync_channel, Receiver},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use devshard_actors::store::{Ack, StoreError, Unavailable};
use slog::{info, Logger};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Config;

use self::{
    link::{open_link, Link},
    readiness::{LeaseClock, NotReady},
    renewals::{release_all, renew_loop},
    writer::PgWriter,
};
pub use self::{
    link::{LinkKind, LinkStatus},
    schema::SCHEMA_VERSION,
    target::{PgConnectError, PgTarget, TlsKeys},
    tls::SslMode,
    writer::QUEUE_BOUND,
};
use super::{
    ops::{Counters, Msg, Op},
    StoreStats,
};

/// Most writes applied (and committed) in one transaction.
pub const MAX_GROUP: usize = 512;

/// Maps a PostgreSQL error: a lost connection or a server shutting down is
/// [`StoreError::Unavailable`], anything else an i/o error with the server's message.
pub(crate) fn pg_err(e: tokio_postgres::Error) -> StoreError {
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    if link::is_connection_lost(e.is_closed(), io, e.code().map(|c| c.code())) {
        return StoreError::Unavailable(Unavailable::Disconnected);
    }
    match e.as_db_error() {
        Some(db) => StoreError::Io(format!("postgres {}: {}", db.code().code(), db.message())),
        None => StoreError::Io(format!("postgres: {e}")),
    }
}

/// Who this replica is and how long its leases last.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    pub id: String,
    pub lease_ttl: Duration,
    /// Where the other replicas reach this one (`http://pod-ip:port`); empty = not reachable,
    /// so nothing is forwarded to it.
    pub advertise_url: String,
}

type Held = Arc<Mutex<HashMap<String, u64>>>;

/// The PostgreSQL-backed [`Store`].
pub struct PgStore {
    replica: ReplicaConfig,
    /// Kept for connections of their own (the shared events listener); boxed, it is large.
    target: Box<PgTarget>,
    sender: mpsc::Sender<Msg>,
    writer: Arc<Link>,
    reader: Arc<Link>,
    leases: Arc<Link>,
    /// Claims run one at a time on the leases' connection (each is a transaction).
    claiming: tokio::sync::Mutex<()>,
    held: Held,
    lease_clock: Arc<LeaseClock>,
    /// The directory finished its first ownership round (readiness).
    ownership_ran: AtomicBool,
    closed: AtomicBool,
    writer_done: Mutex<Option<Receiver<()>>>,
    dropped: Mutex<Option<oneshot::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("replica", &self.replica.id)
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// The store's connections, connected (and the schema migrated).
struct Links {
    writer: Arc<Link>,
    reader: Arc<Link>,
    leases: Arc<Link>,
}

impl PgStore {
    /// Connects to `url` (`postgres://…`, its TLS parameters included), migrates the schema and
    /// starts the writer.
    pub fn open(url: &str, replica: ReplicaConfig, log: Logger) -> Result<PgStore, StoreError> {
        let target =
            PgTarget::parse(url, TlsKeys::default()).map_err(|e| StoreError::Io(e.to_string()))?;
        PgStore::open_target(target, replica, log)
    }

    /// [`PgStore::open`] with a parsed connection config (its own `sslmode`, no root
    /// certificate).
    pub fn open_config(
        config: Config,
        replica: ReplicaConfig,
        log: Logger,
    ) -> Result<PgStore, StoreError> {
        PgStore::open_target(PgTarget::from_config(config), replica, log)
    }

    /// [`PgStore::open`] with a checked target.
    pub fn open_target(
        target: PgTarget,
        replica: ReplicaConfig,
        log: Logger,
    ) -> Result<PgStore, StoreError> {
        let (sender, rx) = mpsc::channel(QUEUE_BOUND);
        let (ready_tx, ready_rx) = sync_channel(1);
        let (done_tx, done_rx) = sync_channel(1);
        let (drop_tx, drop_rx) = oneshot::channel();
        let counters = Arc::new(Counters::default());
        let held: Held = Arc::default();
        let lease_clock = Arc::new(LeaseClock::default());
        let thread_state = (counters.clone(), held.clone(), replica.clone());
        let renew_clock = lease_clock.clone();
        let thread_target = target.clone();
        let handle = std::thread::Builder::new()
            .name("store-postgres".into())
            .spawn(move || {
                let (counters, held, replica) = thread_state;
                let rt = match thread_runtime() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let links = match connect_all(&thread_target, &log).await {
                        Ok(links) => links,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let (writer, reader) = (links.writer.clone(), links.reader.clone());
                    let _ = ready_tx.send(Ok(links));
                    let renewer = tokio::spawn(renew_loop(
                        reader.clone(),
                        replica.clone(),
                        (held.clone(), renew_clock),
                        log.clone(),
                    ));
                    PgWriter::new(writer, replica.id.clone(), counters, log.clone())
                        .run(rx)
                        .await;
                    renewer.abort();
                    release_all(&reader, &replica.id, &held, &log).await;
                    let _ = done_tx.send(());
                    // Reads keep working until the store is dropped.
                    let _ = drop_rx.await;
                });
            })
            .map_err(|e| StoreError::Io(format!("spawning the store thread: {e}")))?;
        let links = ready_rx
            .recv()
            .map_err(|_| StoreError::Io("the store thread ended while connecting".into()))??;
        Ok(PgStore {
            replica,
            target: Box::new(target),
            sender,
            writer: links.writer,
            reader: links.reader,
            leases: links.leases,
            claiming: tokio::sync::Mutex::new(()),
            held,
            lease_clock,
            ownership_ran: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            writer_done: Mutex::new(Some(done_rx)),
            dropped: Mutex::new(Some(drop_tx)),
            thread: Mutex::new(Some(handle)),
            counters,
        })
    }

    /// This replica's id.
    pub fn replica_id(&self) -> &str {
        &self.replica.id
    }

    /// The escrows whose lease this replica holds, with their epochs.
    pub fn held_leases(&self) -> Vec<(String, u64)> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = held.iter().map(|(e, n)| (e.clone(), *n)).collect();
        out.sort();
        out
    }

    /// Whether this replica is ready (`readiness.rs`): the database answers within
    /// [`readiness::PING_TIMEOUT`], the directory ran its first ownership round, and the
    /// heartbeat and held leases were renewed within the TTL.
    /// Awaited on the caller's runtime (which must have a tokio timer).
    pub async fn readiness(&self) -> Result<(), NotReady> {
        let ping = async {
            let client = self.reader.client()?;
            client.simple_query("SELECT 1").await.map_err(pg_err)
        };
        let ping = match tokio::time::timeout(readiness::PING_TIMEOUT, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {} ms",
                readiness::PING_TIMEOUT.as_millis()
            )),
        };
        readiness::decide(
            ping,
            self.ownership_ran.load(Ordering::Relaxed),
            self.lease_clock.since_last(),
            self.replica.lease_ttl,
        )
    }

    /// Whether each connection is up, and how often it came back.
    pub fn connections(&self) -> Vec<LinkStatus> {
        [&self.writer, &self.reader, &self.leases]
            .iter()
            .map(|l| l.status())
            .collect()
    }

    /// A snapshot of the group-commit counters (the WAL fields are SQLite's: zero here).
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            groups_committed: self.counters.groups.load(Ordering::Relaxed),
            ops_committed: self.counters.ops.load(Ordering::Relaxed),
            last_group_size: self.counters.last_group.load(Ordering::Relaxed),
            wal_bytes: 0,
            wal_truncations: 0,
        }
    }

    /// Commits every write issued before, stops the writer and releases the held leases; later
    /// writes resolve with [`StoreError::Closed`]. Blocks until done. Idempotent; reads keep
    /// working until the store is dropped.
    pub fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::SeqCst);
        let done = self
            .writer_done
            .lock()
            .map_err(|_| StoreError::Io("store mutex poisoned".into()))?
            .take();
        let Some(done) = done else { return Ok(()) };
        // Waits for room in a full queue: the writer drains it (failing fast while down).
        let _ = futures::executor::block_on(self.sender.send(Msg::Shutdown));
        // An error means the thread is gone already: nothing left to wait for.
        let _ = done.recv();
        Ok(())
    }

    fn submit(&self, op: Result<Op, StoreError>) -> Ack {
        let op = match op {
            Ok(op) => op,
            Err(e) => return Ack::ready(Err(e)),
        };
        if self.closed.load(Ordering::SeqCst) {
            return Ack::ready(Err(StoreError::Closed));
        }
        let (tx, ack) = Ack::channel();
        match self.sender.try_send(Msg::Write(op, tx)) {
            Ok(()) => ack,
            Err(mpsc::error::TrySendError::Full(_)) => {
                Ack::ready(Err(StoreError::Unavailable(Unavailable::QueueFull)))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Ack::ready(Err(StoreError::Closed)),
        }
    }

    fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let client = self.reader.client()?;
        futures::executor::block_on(client.query(sql, params)).map_err(pg_err)
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        let _ = self.close();
        if let Some(tx) = self.dropped.lock().ok().and_then(|mut d| d.take()) {
            let _ = tx.send(());
        }
        if let Some(h) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = h.join();
        }
    }
}

/// The current-thread runtime of a thread of its own (the store's, the ledger's writer, the
/// shared events listener): PostgreSQL's clients live there, off the actix threads.
pub fn thread_runtime() -> Result<tokio::runtime::Runtime, StoreError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Io(format!("runtime: {e}")))
}

/// Migrates the schema on a connection of its own, then opens the store's connections.
async fn connect_all(target: &PgTarget, log: &Logger) -> Result<Links, StoreError> {
    let (mut client, negotiated) = link::connect_once(target).await?;
    let found = schema::migrate(&mut client).await?;
    info!(log, "PostgreSQL store ready"; "stage" => "store_migrated",
        "host" => target.host(), "tls" => negotiated.tls, "sslmode" => negotiated.mode.as_str(),
        "schema_found" => found, "schema_version" => SCHEMA_VERSION);
    Ok(Links {
        writer: open_link(LinkKind::Writer, target, log).await?,
        reader: open_link(LinkKind::Reader, target, log).await?,
        leases: open_link(LinkKind::Leases, target, log).await?,
    })
}
