//! The PostgreSQL implementation of [`devshard_actors::store::Store`], for several replicas on
//! one database.
//!
//! # Threads and connections
//! One thread, `store-postgres`, owns a current-thread tokio runtime and three connections:
//! the writer's (group commit, `writer.rs`), the readers' and the leases'. Callers never enter
//! that runtime: writes go through an unbounded channel to the writer task, and reads and lease
//! claims await the connection's request channel with `futures::executor::block_on` on the
//! calling thread (tokio-postgres clients are runtime-agnostic; only their connections run on
//! the store's runtime). Reads are meant for start-up and respawn, as with SQLite.
//!
//! # Durability contract
//! As the SQLite store's: an ack resolves after the `COMMIT` (`synchronous_commit = on`) of the
//! transaction holding the write; writes apply in issue order; a failed ack means nothing of that
//! write landed. An append is also refused with [`StoreError::LeaseLost`] unless this replica
//! still holds the escrow's lease at the epoch it claimed (`lease.rs`).
//!
//! # Leases
//! [`Store::claim_escrow`] takes an escrow's lease (before its log is read); a task renews held
//! leases and this replica's heartbeat row every TTL/3 and forgets the leases it lost;
//! [`Store::release_escrow`] gives one up (handoff); [`PgStore::close`] releases them all and
//! deletes the heartbeat row. Which escrows to claim or release is the directory's ownership
//! loop (`devshard_actors::directory::ownership`), planned from [`Store::replica_view`].

pub mod lease;
pub mod readiness;
mod renewals;
mod replicas;
pub(crate) mod schema;
mod store_trait;
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

use devshard_actors::store::{Ack, StoreError};
use slog::{info, warn, Logger};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, Config, NoTls};

pub use self::schema::SCHEMA_VERSION;
use self::{
    readiness::{LeaseClock, NotReady},
    renewals::{release_all, renew_loop},
    writer::PgWriter,
};
use super::{
    ops::{Counters, Msg, Op},
    StoreStats,
};

/// Most writes applied (and committed) in one transaction.
pub const MAX_GROUP: usize = 512;

/// Maps a PostgreSQL error, with the server's message when there is one.
pub(crate) fn pg_err(e: tokio_postgres::Error) -> StoreError {
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
    sender: mpsc::UnboundedSender<Msg>,
    reader: Arc<Client>,
    leases: tokio::sync::Mutex<Client>,
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

/// What the store thread hands back once connected and migrated.
struct Connected {
    reader: Arc<Client>,
    leases: Client,
}

impl PgStore {
    /// Connects to `url` (`postgres://…`), migrates the schema and starts the writer.
    pub fn open(url: &str, replica: ReplicaConfig, log: Logger) -> Result<PgStore, StoreError> {
        let config: Config = url
            .parse()
            .map_err(|e| StoreError::Io(format!("invalid PostgreSQL URL: {e}")))?;
        PgStore::open_config(config, replica, log)
    }

    /// [`PgStore::open`] with a parsed connection config.
    pub fn open_config(
        config: Config,
        replica: ReplicaConfig,
        log: Logger,
    ) -> Result<PgStore, StoreError> {
        let (sender, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = sync_channel(1);
        let (done_tx, done_rx) = sync_channel(1);
        let (drop_tx, drop_rx) = oneshot::channel();
        let counters = Arc::new(Counters::default());
        let held: Held = Arc::default();
        let lease_clock = Arc::new(LeaseClock::default());
        let thread_state = (counters.clone(), held.clone(), replica.clone());
        let renew_clock = lease_clock.clone();
        let handle = std::thread::Builder::new()
            .name("store-postgres".into())
            .spawn(move || {
                let (counters, held, replica) = thread_state;
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(StoreError::Io(format!("runtime: {e}"))));
                        return;
                    }
                };
                rt.block_on(async move {
                    let writer = match connect_all(&config, &log).await {
                        Ok((writer, connected)) => {
                            let _ = ready_tx.send(Ok(connected));
                            writer
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let renewer = tokio::spawn(renew_loop(
                        writer.1.clone(),
                        replica.clone(),
                        (held.clone(), renew_clock),
                        log.clone(),
                    ));
                    PgWriter::new(writer.0, replica.id.clone(), counters)
                        .run(rx)
                        .await;
                    renewer.abort();
                    release_all(&writer.1, &replica.id, &held, &log).await;
                    let _ = done_tx.send(());
                    // Reads keep working until the store is dropped.
                    let _ = drop_rx.await;
                });
            })
            .map_err(|e| StoreError::Io(format!("spawning the store thread: {e}")))?;
        let connected = ready_rx
            .recv()
            .map_err(|_| StoreError::Io("the store thread ended while connecting".into()))??;
        Ok(PgStore {
            replica,
            sender,
            reader: connected.reader,
            leases: tokio::sync::Mutex::new(connected.leases),
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
        let ping = match tokio::time::timeout(
            readiness::PING_TIMEOUT,
            self.reader.simple_query("SELECT 1"),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(pg_err(e).to_string()),
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
        let _ = self.sender.send(Msg::Shutdown);
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
        match self.sender.send(Msg::Write(op, tx)) {
            Ok(()) => ack,
            Err(_) => Ack::ready(Err(StoreError::Closed)),
        }
    }

    fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        futures::executor::block_on(self.reader.query(sql, params)).map_err(pg_err)
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

/// The writer's connection (with the readers' for the renewals), then the others.
async fn connect_all(
    config: &Config,
    log: &Logger,
) -> Result<((Client, Arc<Client>), Connected), StoreError> {
    let mut writer = connect(config, log).await?;
    writer
        .batch_execute("SET synchronous_commit = on")
        .await
        .map_err(pg_err)?;
    let found = schema::migrate(&mut writer).await?;
    info!(log, "PostgreSQL store ready"; "stage" => "store_migrated",
        "schema_found" => found, "schema_version" => SCHEMA_VERSION);
    let reader = Arc::new(connect(config, log).await?);
    let leases = connect(config, log).await?;
    Ok(((writer, reader.clone()), Connected { reader, leases }))
}

async fn connect(config: &Config, log: &Logger) -> Result<Client, StoreError> {
    let (client, connection) = config.connect(NoTls).await.map_err(pg_err)?;
    let log = log.clone();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            warn!(log, "PostgreSQL connection ended"; "stage" => "store_connection_lost",
                "error" => %e);
        }
    });
    Ok(client)
}
