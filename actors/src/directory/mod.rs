//! `Directory`: one per process. Owns the address of every entity actor (escrows, participants)
//! and the list of races in flight; spawns actors on demand; is the supervisor that notices a dead
//! actor (its `Died` notice from `stopped()`) and respawns it from its last committed state in the
//! store; enforces a restart budget per entity (past it the entity is marked failed and requests
//! that need it get 503 instead of a crash loop).
//!
//! - **Survives**: it is the root; if it dies the process is unhealthy (`/healthz` fails).
//! - **Timers**: `respawn <kind> <id>`: the short delay (and store flush) before a dead actor is
//!   respawned (shown in its stats while pending); on a store shared by several replicas, the
//!   ownership loop's `ownership round` and `handoff <escrow>` (`handoff.rs`): which escrows
//!   this replica runs follows their fenced leases, planned by `ownership.rs`.
//! - **Who holds its `Addr`**: the HTTP edge (`web::Data`), races, escrows (as an outcome router),
//!   always as a counted [`TrackedAddr`] (its mailbox depth and message counts are in the actor
//!   registry, see [`crate::stats`]).

mod board;
mod debug;
mod handoff;
mod messages;
pub mod ownership;
mod participants;
pub mod pick;
mod spawn;
mod warm;

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use actix::prelude::*;
use slog::{error, info, Logger};

use crate::{
    clock::SharedClock,
    escrow::{BudgetCell, EscrowActor, EscrowConfig, EscrowInfo},
    metrics::ActorMetrics,
    outcome::ParticipantOutcome,
    participant::ParticipantActor,
    policy::{reason::PickRefusal, settings::HealthSettings},
    protocol::{
        crypto::{Address, SigningKey},
        warm::WarmKeyChecker,
    },
    stats::{tracked_actor, ActorRegistry, Kind, StatsSlot, TrackedAddr},
    store::{ns, SharedStore, StoreError},
};
pub use board::{Board, BoardEscrow, EscrowBoard};
pub use messages::*;
pub use participants::{
    AdminParticipants, GetHealthSettings, ListParticipants, ParticipantOp, ReloadHealthSettings,
    ReloadParticipants, SetHealthSettings, ShareHealthDecisions, HEALTH_SETTINGS_KEY,
};
pub use warm::GetWarmChecker;

/// Errors of directory operations.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DirectoryError {
    #[error("no escrow serves model {0}")]
    UnknownModel(String),
    #[error("escrow {0} is not registered")]
    UnknownEscrow(String),
    #[error("escrow {0} has failed too often and is disabled")]
    EscrowFailed(String),
    /// No escrow of the model can take the request; each one's typed refusal.
    #[error("{}", pick::explain(model, refusals))]
    NoneQualifies {
        model: String,
        refusals: Vec<(String, PickRefusal)>,
    },
    #[error("escrow {0} cannot start: {1}")]
    Start(String, String),
    #[error("escrow {0} is already registered with different chain data")]
    AlreadyRegistered(String),
    #[error("participant admin call failed: {0}")]
    Admin(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Restart budget: at most `max_restarts` within `window_ms` per entity.
#[derive(Debug, Clone, Copy)]
pub struct RestartBudget {
    pub max_restarts: usize,
    pub window_ms: i64,
}

impl Default for RestartBudget {
    fn default() -> Self {
        RestartBudget {
            max_restarts: 5,
            window_ms: 60_000,
        }
    }
}

/// Everything the directory hands to the actors it spawns.
#[derive(Debug, Clone)]
pub struct DirectoryDeps {
    pub key: Arc<SigningKey>,
    pub store: SharedStore,
    pub clock: SharedClock,
    pub log: Logger,
    pub escrow_cfg: EscrowConfig,
    pub budget: RestartBudget,
    /// Enables the `InjectPanic`/`InjectStall` hooks (tests and chaos drills only).
    pub fault_injection: bool,
    pub metrics: ActorMetrics,
    /// Where every actor of this gateway registers its stats (debug listing).
    pub actors: ActorRegistry,
    /// Warm-key grant checks (docs/lifecycle.md §5), shared by every escrow.
    pub warm: WarmKeyChecker,
}

/// One supervised entity.
pub(crate) struct Slot<A: Actor> {
    pub addr: Option<TrackedAddr<A>>,
    pub restarts: VecDeque<i64>,
    pub failed: bool,
}

impl<A: Actor> Default for Slot<A> {
    fn default() -> Self {
        Slot {
            addr: None,
            restarts: VecDeque::new(),
            failed: false,
        }
    }
}

/// A registered escrow.
pub(crate) struct EscrowSlot {
    pub info: Arc<EscrowInfo>,
    pub slot: Slot<EscrowActor>,
    /// Races in flight (shared with the published board, which weighs the pick by it).
    pub in_flight: Arc<AtomicUsize>,
    /// Settling (draining or later): never picked for a new request.
    pub closed: bool,
    /// Balance, nonce and reservations, for admission (shared with the escrow actor).
    pub budget: BudgetCell,
    /// Being handed over to another replica (`handoff.rs`): never picked, not respawned.
    pub handing_over: bool,
}

impl EscrowSlot {
    pub(crate) fn new(info: Arc<EscrowInfo>, closed: bool) -> EscrowSlot {
        EscrowSlot {
            budget: BudgetCell::new(&info),
            info,
            slot: Slot::default(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            closed,
            handing_over: false,
        }
    }
}

/// The directory actor (see the module docs).
pub struct Directory {
    pub(crate) deps: DirectoryDeps,
    pub(crate) escrows: BTreeMap<String, EscrowSlot>,
    pub(crate) participants: BTreeMap<Address, Slot<ParticipantActor>>,
    pub(crate) races: BTreeMap<u64, (String, String)>,
    /// Live health settings (persisted; pushed to every escrow and participant on change).
    pub(crate) settings: Arc<HealthSettings>,
    /// This actor's entry in the actor registry.
    pub(crate) stats: StatsSlot,
    /// Where the escrows the edge picks from are published (`board.rs`).
    pub(crate) board: board::BoardPublisher,
    /// Where participants send their own health decisions (`ShareHealthDecisions`).
    pub(crate) decisions: crate::participant::messages::DecisionSink,
    /// The ownership loop, when replicas share the store (`handoff.rs`).
    pub(crate) ownership: Option<handoff::Ownership>,
}

impl Directory {
    pub fn new(deps: DirectoryDeps) -> Directory {
        let stats = deps
            .actors
            .register(Kind::Directory, "directory", &deps.clock);
        Directory {
            stats,
            deps,
            escrows: BTreeMap::new(),
            participants: BTreeMap::new(),
            races: BTreeMap::new(),
            board: board::BoardPublisher::new(),
            settings: Arc::new(HealthSettings::default()),
            decisions: None,
            ownership: None,
        }
    }
}

impl Actor for Directory {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        self.settings = Arc::new(participants::load_settings(self));
        // Shared by several replicas: the ownership loop decides which escrows run here.
        self.ownership = self.deps.store.replica().map(handoff::Ownership::new);
        let records = match self.deps.store.list(ns::ESCROWS) {
            Ok(r) => r,
            Err(e) => {
                error!(self.deps.log, "escrow registrations not loaded"; "error" => %e);
                return;
            }
        };
        for (id, value) in records {
            match serde_json::from_value::<EscrowInfo>(value) {
                Ok(info) => {
                    let info = Arc::new(info);
                    // A settlement in progress survives the restart: still not picked.
                    let closed = crate::settlement::load_record(&self.deps.store, &id).is_some();
                    self.escrows
                        .insert(id.clone(), EscrowSlot::new(info, closed));
                    if self.ownership.is_some() {
                        continue;
                    }
                    if let Err(e) = self.spawn_escrow(&id, ctx) {
                        error!(self.deps.log, "escrow not started"; "escrow" => &id, "error" => %e);
                    }
                }
                Err(e) => error!(self.deps.log, "escrow registration unreadable";
                    "escrow" => &id, "error" => %e),
            }
        }
        self.publish_board();
        if self.ownership.is_some() {
            ctx.notify(handoff::OwnershipRound);
        }
        info!(self.deps.log, "directory started"; "stage" => "directory_started",
            "escrows" => self.escrows.len(), "shared_store" => self.ownership.is_some());
    }
}

tracked_actor!(Directory);

impl Handler<ParticipantOutcome> for Directory {
    type Result = ();

    fn handle(&mut self, msg: ParticipantOutcome, ctx: &mut Self::Context) {
        if let Ok(addr) = self.participant(&msg.participant, ctx) {
            if addr.try_send(msg).is_err() {
                error!(self.deps.log, "participant mailbox full; outcome dropped";
                    "stage" => "outcome_dropped");
            }
        }
    }
}

impl Handler<GetParticipantActor> for Directory {
    type Result = Result<TrackedAddr<ParticipantActor>, DirectoryError>;

    fn handle(&mut self, msg: GetParticipantActor, ctx: &mut Self::Context) -> Self::Result {
        self.participant(&msg.address, ctx)
    }
}

impl Handler<GetEscrow> for Directory {
    type Result = Option<TrackedAddr<EscrowActor>>;

    fn handle(&mut self, msg: GetEscrow, _: &mut Self::Context) -> Self::Result {
        self.escrows.get(&msg.escrow_id)?.slot.addr.clone()
    }
}

impl Handler<RaceStarted> for Directory {
    type Result = ();

    fn handle(&mut self, msg: RaceStarted, _: &mut Self::Context) {
        if let Some(e) = self.escrows.get(&msg.escrow_id) {
            e.in_flight.fetch_add(1, Ordering::Relaxed);
        }

        self.races
            .insert(msg.race_id, (msg.escrow_id, msg.request_id));
    }
}

impl Handler<RaceEnded> for Directory {
    type Result = ();

    fn handle(&mut self, msg: RaceEnded, _: &mut Self::Context) {
        if self.races.remove(&msg.race_id).is_some() {
            if let Some(e) = self.escrows.get(&msg.escrow_id) {
                let less = |n: usize| Some(n.saturating_sub(1));
                let _ = e
                    .in_flight
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, less);
            }
        }
    }
}

impl Handler<GetStatus> for Directory {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _: GetStatus, _: &mut Self::Context) -> Self::Result {
        let mut entities = self.escrow_statuses();
        entities.reserve_exact(self.participants.len());
        for (addr, p) in &self.participants {
            entities.push(EntityStatus {
                kind: ActorKind::Participant,
                id: addr.to_string(),
                alive: p.addr.as_ref().is_some_and(|a| a.connected()),
                failed: p.failed,
                restarts: u32::try_from(p.restarts.len()).unwrap_or(u32::MAX),
                in_flight: 0,
            });
        }
        let races = self
            .races
            .iter()
            .map(|(id, (e, r))| (*id, e.clone(), r.clone()))
            .collect();
        MessageResult(DirectoryStatus { entities, races })
    }
}

impl Handler<GetEscrowStatuses> for Directory {
    type Result = MessageResult<GetEscrowStatuses>;

    fn handle(&mut self, _: GetEscrowStatuses, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.escrow_statuses())
    }
}

impl Directory {
    fn escrow_statuses(&self) -> Vec<EntityStatus> {
        self.escrows
            .iter()
            .map(|(id, e)| EntityStatus {
                kind: ActorKind::Escrow,
                id: id.clone(),
                alive: e.slot.addr.as_ref().is_some_and(|a| a.connected()),
                failed: e.slot.failed,
                restarts: u32::try_from(e.slot.restarts.len()).unwrap_or(u32::MAX),
                in_flight: e.in_flight.load(Ordering::Relaxed),
            })
            .collect()
    }
}
