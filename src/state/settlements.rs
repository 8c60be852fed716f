//! The settlement actors of this process: one per escrow being settled, started on demand by
//! the admin API (or auto-settle) and, at start-up, for every persisted settlement that is not
//! settled yet, so each resumes where its record says. They run on the system arbiter, next to
//! the directory and the escrows.

mod retire;

use std::{
    collections::BTreeMap,
    rc::Rc,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use actix::prelude::*;
use devshard_actors::{
    directory::{Directory, EscrowBoard},
    escrow::messages::GetSnapshot,
    escrow::{
        key::{self, KeyError},
        EscrowInfo,
    },
    settlement::{
        chain::ChainTxClient, escrow_port::DirectoryEscrow, load_record, machine::auto_settle_due,
        metrics::SettlementMetrics, SettlementActor, SettlementDeps, SettlementRecord,
        SettlementState, NS_SETTLEMENT,
    },
    stats::TrackedAddr,
    store::{ns, SharedStore},
};
use slog::{info, Logger};

pub use self::retire::{RetireError, RetireRequest, Retired, NS_RETIRE};
use crate::config::Config;

/// Why a settlement could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    #[error("escrow {0} is not registered with this gateway")]
    UnknownEscrow(String),
    #[error("escrow {0} is already settled")]
    AlreadySettled(String),
    #[error("escrow {escrow} was created by {creator}, not by this gateway's key {signer}")]
    NotOurs {
        escrow: String,
        creator: String,
        signer: String,
    },
    #[error("escrow {0} has no settlement")]
    NoSettlement(String),
    #[error("escrow {0}: its signing key cannot be read: {1}")]
    Key(String, KeyError),
    /// Several replicas on one database: another replica holds the escrow's lease, and only
    /// the lease owner drives its settlement.
    #[error("escrow {0} is served by another replica, which drives its settlement; retry there or later")]
    NotOwner(String),
}

/// The registry of settlement actors (cheap to clone).
#[derive(Clone)]
pub struct Settlements {
    actors: Arc<Mutex<BTreeMap<String, Addr<SettlementActor>>>>,
    deps: SettlementDeps,
    directory: TrackedAddr<Directory>,
    /// The directory's published escrows: the auto-settle tick reads each registration and
    /// actor from it (it listed and decoded every registration from the store 4 times a second:
    /// ≈ 37 MB of JSON values each time at 1 000 escrows, issue 16).
    board: EscrowBoard,
    arbiter: ArbiterHandle,
    auto_settle: bool,
    /// Worst-case cost of one request in tokens (`WORST_CASE_INPUT_BYTES + max_tokens_cap`).
    worst_case_tokens: u64,
    /// Each escrow's nonce and balance budget as the last auto-settle tick saw it.
    budgets: Arc<Mutex<BTreeMap<String, Budget>>>,
    /// `devshard_escrow_retirements_total{step}` (`retire.rs`).
    retirements: Option<prometheus::IntCounterVec>,
    /// When each settlement that changed owner was last resumed here (`retire.rs`).
    resumed: Arc<Mutex<BTreeMap<String, Instant>>>,
}

/// An escrow's nonce and balance budget (what `/v1/debug/actors` and the debug UI show).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Budget {
    pub nonce: u64,
    /// Last nonce that may serve (`max_nonce − (N + 1)`).
    pub serving_limit: u64,
    /// Inferences started and not settled yet: each may still take a nonce before the finalize
    /// round, so they count as used (`nonce + unsettled + nonces_left = serving_limit` until
    /// the limit).
    pub unsettled: u64,
    pub nonces_left: u64,
    pub balance: u64,
}

/// One escrow's settlement as the debug listing shows it.
#[derive(Debug, Clone)]
pub struct SettlementView {
    pub escrow_id: String,
    /// A settlement actor is running for the escrow.
    pub running: bool,
    /// `None` while the escrow is active (or its actor did not answer in time).
    pub record: Option<SettlementRecord>,
    pub budget: Option<Budget>,
}

/// How often escrows are checked for auto-settlement (and their budget gauges updated).
const AUTO_INTERVAL: Duration = Duration::from_millis(250);
/// Input bytes assumed for the worst-case request of the balance rule.
pub const WORST_CASE_INPUT_BYTES: u64 = 64 * 1024;

impl std::fmt::Debug for Settlements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settlements").finish_non_exhaustive()
    }
}

impl Settlements {
    /// Built in the system arbiter's context (where the settlement actors will run).
    pub fn new(
        config: &Config,
        store: SharedStore,
        directory: TrackedAddr<Directory>,
        board: EscrowBoard,
        clock: devshard_actors::clock::SharedClock,
        registry: &prometheus::Registry,
        log: Logger,
    ) -> Settlements {
        let deps = SettlementDeps {
            store,
            clock,
            log,
            chain: ChainTxClient {
                rest_url: config.chain.rest_url.clone(),
                timeout: config.chain.timeout,
            },
            key: (*config.key).clone(),
            tx: config.settlement.tx(),
            metrics: SettlementMetrics::register(registry).ok(),
            query_timeout: Duration::from_secs(30),
        };
        Settlements {
            actors: Arc::default(),
            deps,
            directory,
            board,
            arbiter: Arbiter::current(),
            auto_settle: config.settlement.auto_settle,
            worst_case_tokens: WORST_CASE_INPUT_BYTES + config.max_tokens_cap,
            budgets: Arc::default(),
            retirements: retire::register(registry).ok(),
            resumed: Arc::default(),
        }
    }

    /// Starts the auto-settle check on the current arbiter: every [`AUTO_INTERVAL`], each
    /// escrow's nonce and balance budget (also exported as gauges).
    pub fn spawn_auto_settle(&self) {
        let this = self.clone();
        actix::spawn(async move {
            loop {
                tokio::time::sleep(AUTO_INTERVAL).await;
                this.tick().await;
            }
        });
    }

    async fn tick(&self) {
        self.pick_up_retirements().await;
        let shared = self.deps.store.replica().is_some();
        let board = self.board.load();
        for e in &board.escrows {
            let (id, info) = (e.id.as_str(), &e.info);
            let Some(addr) = &e.addr else { continue };
            let Ok(snap) = addr.send(GetSnapshot).await else {
                continue;
            };
            // Every unsettled inference may still take a nonce of its own before the finalize
            // round (`nonce_room`): counted as used.
            let limit = info.last_active_nonce();
            let n = info.group_size() as u64;
            let unsettled = u64::try_from(snap.unsettled).unwrap_or(u64::MAX);
            let used = snap.nonce.saturating_add(unsettled);
            let left = limit.saturating_sub(used);
            let budget = Budget {
                nonce: snap.nonce,
                serving_limit: limit,
                unsettled,
                nonces_left: left,
                balance: snap.balance,
            };
            self.budgets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.to_string(), budget);
            if let Some(m) = &self.deps.metrics {
                m.balance
                    .with_label_values(&[id])
                    .set(i64::try_from(snap.balance).unwrap_or(i64::MAX));
                m.nonces_left
                    .with_label_values(&[id])
                    .set(i64::try_from(left).unwrap_or(i64::MAX));
            }
            if !self.auto_settle && !shared {
                continue;
            }
            if let Some(record) = load_record(&self.deps.store, id) {
                self.take_over(id, &record);
                continue;
            }
            if !self.auto_settle {
                continue;
            }
            let worst = self
                .worst_case_tokens
                .saturating_mul(info.config.token_price)
                .saturating_add(info.config.fee_per_nonce);
            // Margin: the picking rule's N + 1, plus N + 1 for requests already on their way.
            let margin = 2 * (n + 1);
            if let Some(reason) = auto_settle_due(used, limit, margin, snap.balance, worst) {
                info!(self.deps.log, "escrow settles by itself"; "stage" => "settlement_started",
                    "escrow" => id, "reason" => ?reason, "nonce" => snap.nonce,
                    "balance" => snap.balance);
                let _ = self.start(id, true).await;
            }
        }
    }

    fn info(&self, escrow_id: &str) -> Result<EscrowInfo, SettleError> {
        self.deps
            .store
            .get(ns::ESCROWS, escrow_id)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| SettleError::UnknownEscrow(escrow_id.to_owned()))
    }

    fn actor(&self, escrow_id: &str) -> Result<Addr<SettlementActor>, SettleError> {
        let info = self.info(escrow_id)?;
        // The escrow's own key when it names one (docs/lifecycle.md §4), else the gateway's.
        let source = key::stored(&self.deps.store, escrow_id);
        let signing = match &source {
            Some(s) => s
                .load()
                .map_err(|e| SettleError::Key(escrow_id.to_owned(), e))?,
            None => self.deps.key.clone(),
        };
        if &info.creator != signing.address() {
            return Err(SettleError::NotOurs {
                escrow: escrow_id.to_owned(),
                creator: info.creator.to_string(),
                signer: signing.address().to_string(),
            });
        }
        let mut actors = self.actors.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = actors.get(escrow_id).filter(|a| a.connected()) {
            return Ok(a.clone());
        }
        // One driver per escrow: the replica holding its lease (every escrow on SQLite). The
        // actor's own record writes are fenced by that lease too (`put_fenced`).
        if !self.deps.store.holds_lease(escrow_id) {
            return Err(SettleError::NotOwner(escrow_id.to_owned()));
        }
        let mut deps = self.deps.clone();
        deps.key = signing;
        let port = DirectoryEscrow {
            directory: self.directory.clone(),
            escrow_id: escrow_id.to_owned(),
        };
        let addr = SettlementActor::start_in_arbiter(&self.arbiter, move |_| {
            SettlementActor::new(info, Rc::new(port), deps)
        });
        actors.insert(escrow_id.to_owned(), addr.clone());
        Ok(addr)
    }

    /// Starts every persisted settlement that is not settled yet.
    pub fn resume(&self) {
        let records = self.deps.store.list(NS_SETTLEMENT).unwrap_or_default();
        for (id, value) in records {
            let Ok(r) = serde_json::from_value::<SettlementRecord>(value) else {
                continue;
            };
            if matches!(r.state, SettlementState::Settled { .. }) {
                continue;
            }
            if !self.deps.store.holds_lease(&id) {
                continue; // its lease owner resumes it
            }
            info!(self.deps.log, "settlement resumed"; "stage" => "settlement_started",
                "escrow" => &id, "state" => r.state.label());
            let _ = self.actor(&id);
        }
    }

    /// Starts (or joins) the settlement of an escrow.
    pub async fn start(
        &self,
        escrow_id: &str,
        broadcast: bool,
    ) -> Result<SettlementRecord, SettleError> {
        let addr = self.actor(escrow_id)?;
        let current = addr
            .send(devshard_actors::settlement::GetSettlement)
            .await
            .ok()
            .flatten();
        if let Some(r) = &current {
            if broadcast && matches!(r.state, SettlementState::Settled { .. }) {
                return Err(SettleError::AlreadySettled(escrow_id.to_owned()));
            }
        }
        let record = addr
            .send(devshard_actors::settlement::StartSettlement { broadcast })
            .await
            .ok()
            .flatten()
            .ok_or_else(|| SettleError::NoSettlement(escrow_id.to_owned()))?;
        // Durable before visible: the record's write is ordered before this flush.
        let _ = self.deps.store.flush().await;
        Ok(record)
    }

    /// Every registered escrow's settlement state and budget; a running actor is asked with
    /// `deadline` (one that misses it shows its last durable record).
    pub async fn views(&self, deadline: Duration) -> Vec<SettlementView> {
        let escrows: Vec<String> = self
            .board
            .load()
            .escrows
            .iter()
            .map(|e| e.id.clone())
            .collect();
        let running = self
            .actors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let budgets = self
            .budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let probes = escrows.into_iter().map(|id| {
            let addr = running.get(&id).filter(|a| a.connected()).cloned();
            let budget = budgets.get(&id).copied();
            let store = self.deps.store.clone();
            async move {
                let asked = match &addr {
                    Some(a) => a
                        .send(devshard_actors::settlement::GetSettlement)
                        .timeout(deadline)
                        .await
                        .ok(),
                    None => None,
                };
                let record = match asked {
                    Some(r) => r,
                    None => load_record(&store, &id),
                };
                SettlementView {
                    running: addr.is_some(),
                    escrow_id: id,
                    record,
                    budget,
                }
            }
        });
        futures::future::join_all(probes).await
    }

    /// The record of an escrow's settlement (`None` while it is active).
    pub async fn get(&self, escrow_id: &str) -> Result<Option<SettlementRecord>, SettleError> {
        let info = self.info(escrow_id)?;
        let running = self
            .actors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&info.escrow_id)
            .cloned();
        match running {
            Some(a) => Ok(a
                .send(devshard_actors::settlement::GetSettlement)
                .await
                .ok()
                .flatten()),
            None => Ok(devshard_actors::settlement::load_record(
                &self.deps.store,
                escrow_id,
            )),
        }
    }
}
