//! The durable cost ledger in the process ([`Ledger`]): what each request cost, for brokers who
//! bill their clients.
//!
//! - **Rows**: when a request that reached an escrow has both its outcome and its race report
//!   (`crate::state::accounting` calls [`Ledger::record`]), one request row and one row per nonce
//!   its race used go to the ledger tables (`crate::store::ledger`). The API key is stored as
//!   an id (`key_` + the first 16 hex digits of its SHA-256), never the key.
//! - **Costs**: a thread, `ledger-settle`, tails each escrow's **durable diff log** every
//!   `settle_interval_ms` with its own copy of the protocol state machine (the same code the
//!   escrow and the hosts run; signatures verified). A nonce is settled when its inference is
//!   finished (`MsgFinishInference`) or timed out by vote (`MsgTimeoutInference`), or when its
//!   diff carried no inference: then its tokens, reserved and actual cost and the per-nonce fee
//!   are written, and a request's cost columns are completed once all its nonces are. Nothing in
//!   the escrow is touched: the diff log is the record of what the escrow owes.
//! - **One replica**: with several replicas on one PostgreSQL database the rows are shared, and
//!   the tail runs on the replica that leads its duty (`crate::store::duty::LEDGER_TAIL`); the
//!   others check every tick whether they must take over.
//! - **Retention**: rows older than `[ledger] retention_days` are deleted (checked hourly).
//!
//! What survives a restart: every committed row. The tail restarts from nonce 1 of each escrow
//! with unsettled nonces (it keeps the settlements it saw, up to [`SETTLED_CACHE`], so a nonce
//! whose record was sealed before its row arrived still settles). An escrow's replica that no
//! unsettled row needed for 30 s is let go (log stage `ledger_tail_released`) and rebuilt the
//! same way when a row needs it again: idle escrows do not hold their state twice.

mod tail;

use std::{
    sync::{
        mpsc::{channel, RecvTimeoutError, Sender},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::Duration,
};

use devshard_actors::{
    clock::SharedClock,
    store::{SharedStore, StoreError},
};
use sha2::{Digest, Sha256};
use slog::Logger;

use super::accounting::{Outcome, Record};
use crate::{
    config::{operator::LedgerConfig, Secret},
    store::{
        duty::Duty,
        ledger::{AttemptRow, LedgerStore, RequestRow},
    },
};
use tail::Tail;
pub use tail::SETTLED_CACHE;

/// How often retention runs.
const PRUNE_EVERY: Duration = Duration::from_secs(3_600);

/// The id of an API key (a hash, never the key).
pub fn key_id(key: &Secret) -> String {
    let digest = Sha256::digest(key.expose().as_bytes());
    format!("key_{}", &hex::encode(digest)[..16])
}

/// The ledger (cheap to clone).
#[derive(Clone)]
pub struct Ledger {
    store: Arc<LedgerStore>,
    /// Key id of API key `i`.
    key_ids: Arc<Vec<String>>,
    stop: Arc<Mutex<Option<Stopper>>>,
}

/// Stops the settlement tail (send, then join).
type Stopper = (Sender<()>, JoinHandle<()>);

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ledger")
    }
}

/// What the settlement tail needs.
pub struct LedgerDeps {
    pub store: SharedStore,
    /// The tail's one-replica duty (`crate::store::duty::LEDGER_TAIL`): with several replicas
    /// on one database, one of them completes the costs.
    pub duty: Duty,
    pub clock: SharedClock,
    pub log: Logger,
}

impl Ledger {
    /// Takes the opened ledger tables and starts the settlement tail.
    pub fn start(
        store: LedgerStore,
        cfg: LedgerConfig,
        api_keys: &[Secret],
        deps: LedgerDeps,
    ) -> Result<Ledger, StoreError> {
        let store = Arc::new(store);
        let (tx, rx) = channel::<()>();
        let mut tail = Tail::new(store.clone(), deps);
        let every = Duration::from_millis(cfg.settle_interval_ms.max(10));
        let retention = cfg.retention_ms();
        let handle = std::thread::Builder::new()
            .name("ledger-settle".into())
            .spawn(move || {
                let mut since_prune = PRUNE_EVERY;
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                    tail.tick();
                    since_prune += every;
                    if let (Some(keep), true) = (retention, since_prune >= PRUNE_EVERY) {
                        since_prune = Duration::ZERO;
                        tail.prune(keep);
                    }
                }
            })
            .map_err(|e| StoreError::Io(format!("spawning the ledger tail: {e}")))?;
        Ok(Ledger {
            store,
            key_ids: Arc::new(api_keys.iter().map(key_id).collect()),
            stop: Arc::new(Mutex::new(Some((tx, handle)))),
        })
    }

    /// The tables.
    pub fn store(&self) -> &LedgerStore {
        &self.store
    }

    /// The key id of a caller label (`api_key#<i>` → its hash; `admin`, `anonymous` as is).
    pub fn caller_id(&self, caller: &str) -> String {
        caller
            .strip_prefix("api_key#")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| self.key_ids.get(i).cloned())
            .unwrap_or_else(|| caller.to_string())
    }

    /// Writes the row of an ended request (no-op for one that never reached an escrow).
    pub fn record(&self, r: &Record) {
        let Some(escrow_id) = r.escrow.clone() else {
            return;
        };
        let (outcome, status) = match &r.outcome {
            Outcome::InFlight => return,
            Outcome::Completed { status } => ("completed".to_string(), *status),
            Outcome::Failed { status, code, .. } => (code.clone(), *status),
        };
        let winner_nonce = r
            .attempts
            .iter()
            .find(|a| a.result.starts_with("won"))
            .map(|a| a.nonce);
        let ended_ms = r
            .finished_at_ms
            .max(r.race_ended_at_ms)
            .unwrap_or(r.started_at_ms);
        let mut attempts: Vec<AttemptRow> = r
            .attempts
            .iter()
            .map(|a| AttemptRow {
                nonce: a.nonce,
                host: a.host.clone(),
                role: a.role.to_string(),
                result: a.result.to_string(),
                inference: None,
                input_tokens: None,
                output_tokens: None,
                reserved_cost: None,
                actual_cost: None,
                fee: None,
                cost: None,
                settled_ms: None,
            })
            .collect();
        attempts.dedup_by_key(|a| a.nonce);
        self.store.insert(RequestRow {
            request_id: r.request_id.clone(),
            started_ms: r.started_at_ms,
            ended_ms,
            model: r.model.clone(),
            escrow_id,
            api_key_id: self.caller_id(&r.caller),
            stream: r.stream,
            outcome,
            status,
            winner_nonce,
            input_tokens: None,
            output_tokens: None,
            reserved_cost: None,
            actual_cost: None,
            total_cost: None,
            settled_ms: None,
            attempts,
        });
    }

    /// Stops the tail and flushes the writer.
    pub fn stop(&self) {
        if let Some((tx, h)) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(());
            let _ = h.join();
        }
        self.store.close();
    }
}
