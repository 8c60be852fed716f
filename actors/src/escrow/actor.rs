//! `EscrowActor`: one per escrow. Owns the protocol session (nonce counter, local state machine,
//! in-memory diff window, host sync nonces, pending txs, signatures), the nonce picker, the
//! bookkeeping of every attempt (sent, receipt, finished, pending timeout) and timeout handling.
//!
//! - **Who holds its `Addr`**: the `Directory` (and races, for the duration of one request).
//! - **Survives a restart**: nothing in memory is trusted after the actor stopped (a recoverable
//!   fault such as a failed fsync stops it; a panic kills it): the `Directory` respawns it from
//!   the store: the diff log replays into a fresh session, sync nonces come from their record, and
//!   every nonce that was handed out without a finish or timeout in the log is re-registered so it
//!   is still settled (finish reconciliation, then timeout votes).
//! - **Timers** (named as in its stats, `GET /v1/debug/actors`): `picker_hold` (a nonce nobody
//!   may take waits `picker_hold_ms` before it is withheld), `nonce <n>` per unsettled nonce
//!   (finish reconciliation poll or timeout deadline), `fault_release` (held host faults confirmed
//!   by the correlation guard), and the 1 s `sync_persist` interval (dirty host sync nonces).
//! - **Stats**: its mailbox depth and message counts are counted by the [`TrackedAddr`]s that
//!   every sender holds; a respawned actor starts with fresh stats.
//! - **Durable before visible**: a grant is answered only after the store acknowledged its diff.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    sync::Arc,
    time::Duration,
};

use actix::prelude::*;
use slog::{info, o, warn, Logger};
use tokio::sync::oneshot;

use super::{
    config::EscrowConfig,
    error::EscrowError,
    messages::{
        AttemptKind, EscrowSnapshot, GetSnapshot, InferenceParams, InjectPanic, InjectStall,
        NonceGrant, Retire,
    },
    nonces::NonceEntry,
    outcomes::HeldOutcome,
    session::Session,
};
use crate::{
    clock::SharedClock,
    directory::{ActorKind, Died},
    metrics::ActorMetrics,
    outcome::OutcomeSink,
    policy::{
        correlation::SharedFaultDetector, health::HealthState, hedge::HedgeBudget,
        perf::PerfEstimates, settings::HealthSettings,
    },
    protocol::crypto::{Address, SigningKey},
    repair::RepairActor,
    stats::{
        timers::{self, Timer},
        tracked_actor, ActorRegistry, Kind, StatsSlot, TrackedAddr, TrackedRecipient,
    },
    store::{ns, SharedStore},
};

/// How often dirty host sync nonces are persisted.
const SYNC_PERSIST_INTERVAL: Duration = Duration::from_secs(1);
/// Mailbox capacity: races park on `send().await` when the escrow is busy.
const MAILBOX_CAPACITY: usize = 1024;

/// Everything an escrow actor is given besides its session.
#[derive(Clone)]
pub struct EscrowDeps {
    pub key: Arc<SigningKey>,
    pub store: SharedStore,
    pub clock: SharedClock,
    pub log: Logger,
    pub cfg: EscrowConfig,
    pub outcomes: OutcomeSink,
    pub fault_injection: bool,
    pub metrics: ActorMetrics,
    pub settings: Arc<HealthSettings>,
    /// Where this actor and its repairs register their stats.
    pub actors: ActorRegistry,
}

/// What the escrow knows about one participant's health.
#[derive(Debug, Clone, Default)]
pub struct HostHealth {
    pub health: HealthState,
    pub perf: PerfEstimates,
    pub routable: bool,
}

/// A race waiting for a nonce.
pub(super) struct Waiter {
    pub race_id: u64,
    pub params: Arc<InferenceParams>,
    pub exclude: Vec<Address>,
    pub kind: AttemptKind,
    pub reply: oneshot::Sender<Result<NonceGrant, EscrowError>>,
}

/// The escrow actor (see the module docs).
pub struct EscrowActor {
    pub(super) session: Session,
    pub(super) key: Arc<SigningKey>,
    pub(super) store: SharedStore,
    pub(super) clock: SharedClock,
    pub(super) log: Logger,
    pub(super) cfg: EscrowConfig,
    pub(super) outcomes: OutcomeSink,
    /// Every nonce we handed out that is not settled yet.
    pub(super) attempts: BTreeMap<u64, NonceEntry>,
    /// Races waiting for a nonce, in arrival order.
    pub(super) waiting: VecDeque<Waiter>,
    /// Participants we must not send inference to in this escrow (ejected, under repair).
    pub(super) withheld: BTreeSet<Address>,
    /// Highest nonce whose diff the store acknowledged.
    pub(super) durable_nonce: u64,
    /// Sync nonces changed since they were last persisted.
    pub(super) sync_dirty: bool,
    /// The picker-hold timer, while armed.
    pub(super) hold_timer: Option<Timer>,
    /// Timers per nonce (finish reconciliation or timeout deadline).
    pub(super) nonce_timers: BTreeMap<u64, Timer>,
    /// Timeout votes run one nonce at a time (one RPC per verifier at a time).
    pub(super) timeout_queue: VecDeque<u64>,
    pub(super) timeout_running: bool,
    pub(super) fault_injection: bool,
    pub(super) metrics: ActorMetrics,
    /// Live health settings (pushed by the directory).
    pub(super) settings: Arc<HealthSettings>,
    /// Latest health and perf of each participant of this escrow.
    pub(super) hosts_health: BTreeMap<Address, HostHealth>,
    /// Correlation guard (HEALTH.md §1).
    pub(super) detector: SharedFaultDetector<Address>,
    /// Host faults waiting for confirmation.
    pub(super) held: Vec<HeldOutcome>,
    pub(super) release_timer: Option<Timer>,
    /// Last success per participant (relative evidence).
    pub(super) last_success: BTreeMap<Address, i64>,
    /// This escrow has seen a success.
    pub(super) any_success: bool,
    /// Hedge token bucket (HEALTH.md §4).
    pub(super) budget: HedgeBudget,
    /// No participant is routable: the least-bad hosts are raced anyway.
    pub(super) panic_mode: bool,
    /// One repair actor per diverged participant (HEALTH.md §6).
    pub(super) repairs: BTreeMap<Address, TrackedAddr<RepairActor>>,
    /// Diffs encoded once for the request bodies that carry them.
    pub(super) wire: super::wire_cache::WireDiffs,
    /// Diverged participants whose repair gave up (still withheld).
    pub(super) gave_up: BTreeSet<Address>,
    /// Told when this actor stops, so the directory can respawn it.
    pub(super) on_stop: Option<TrackedRecipient<Died>>,
    /// Set by `Retire`: the stop is final and nobody should respawn the actor.
    pub(super) retired: bool,
    /// This actor's entry in the actor registry (mailbox, messages, timers).
    pub(super) stats: StatsSlot,
    /// The registry, for the repair actors this escrow starts.
    pub(super) actors: ActorRegistry,
}

impl EscrowActor {
    /// A new actor over a session (fresh or restored).
    pub fn new(session: Session, deps: EscrowDeps) -> EscrowActor {
        let escrow_id = session.info().escrow_id.clone();
        let durable_nonce = session.nonce();
        let detector = SharedFaultDetector::new(&deps.settings);
        let budget = HedgeBudget::new(&deps.settings);
        let stats = deps
            .actors
            .register(Kind::Escrow, escrow_id.clone(), &deps.clock);
        EscrowActor {
            session,
            key: deps.key,
            store: deps.store,
            clock: deps.clock,
            log: deps.log.new(o!("escrow" => escrow_id)),
            cfg: deps.cfg,
            outcomes: deps.outcomes,
            attempts: BTreeMap::new(),
            waiting: VecDeque::new(),
            withheld: BTreeSet::new(),
            durable_nonce,
            sync_dirty: false,
            hold_timer: None,
            nonce_timers: BTreeMap::new(),
            timeout_queue: VecDeque::new(),
            timeout_running: false,
            fault_injection: deps.fault_injection,
            metrics: deps.metrics,
            settings: deps.settings,
            hosts_health: BTreeMap::new(),
            detector,
            held: Vec::new(),
            release_timer: None,
            last_success: BTreeMap::new(),
            any_success: false,
            budget,
            panic_mode: false,
            repairs: BTreeMap::new(),
            wire: super::wire_cache::WireDiffs::default(),
            gave_up: BTreeSet::new(),
            on_stop: None,
            retired: false,
            stats,
            actors: deps.actors,
        }
    }

    /// Tells `recipient` when the actor stops (panics included).
    pub fn with_death_notice(mut self, recipient: TrackedRecipient<Died>) -> Self {
        self.on_stop = Some(recipient);
        self
    }

    pub(super) fn escrow_id(&self) -> &str {
        &self.session.info().escrow_id
    }

    pub(super) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Registers nonces restored from the log that still need settling.
    pub fn with_orphans(mut self, orphans: Vec<NonceEntry>) -> Self {
        for entry in orphans {
            self.attempts.insert(entry.nonce, entry);
        }
        self
    }

    fn persist_syncs(&mut self) {
        if !self.sync_dirty {
            return;
        }
        self.sync_dirty = false;
        let syncs: BTreeMap<String, u64> = self
            .session
            .host_syncs()
            .iter()
            .map(|(a, n)| (a.to_string(), *n))
            .collect();
        let record = serde_json::json!({ "host_sync": syncs });
        let ack = self.store.put(ns::SESSIONS, self.escrow_id(), record);
        let log = self.log.clone();
        actix::spawn(async move {
            if let Err(e) = ack.await {
                warn!(log, "sync nonces not persisted"; "stage" => "store_error", "error" => %e);
            }
        });
    }
}

impl Actor for EscrowActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        let stats = self.stats.clone();
        let _ = timers::run_interval(
            &stats,
            ctx,
            "sync_persist",
            SYNC_PERSIST_INTERVAL,
            |act, _| act.persist_syncs(),
        );
        let nonces: Vec<u64> = self.attempts.keys().copied().collect();
        for nonce in nonces {
            self.arm_nonce_timer(nonce, ctx);
        }
        info!(self.log, "escrow actor started"; "stage" => "escrow_started",
            "nonce" => self.session.nonce(), "unsettled" => self.attempts.len());
    }

    fn stopping(&mut self, _: &mut Self::Context) -> Running {
        for w in self.waiting.drain(..) {
            let _ = w.reply.send(Err(EscrowError::ShuttingDown(
                self.session.info().escrow_id.clone(),
            )));
        }
        self.persist_syncs();
        self.stop_repairs();
        Running::Stop
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if self.retired {
            return;
        }
        if let Some(r) = &self.on_stop {
            r.do_send(Died {
                kind: ActorKind::Escrow,
                id: self.escrow_id().to_string(),
            });
        }
    }
}

tracked_actor!(EscrowActor);

impl Handler<Retire> for EscrowActor {
    type Result = ();

    fn handle(&mut self, _: Retire, ctx: &mut Self::Context) {
        self.retired = true;
        ctx.stop();
    }
}

impl Handler<GetSnapshot> for EscrowActor {
    type Result = MessageResult<GetSnapshot>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.snapshot())
    }
}

impl Handler<InjectPanic> for EscrowActor {
    type Result = ();

    #[allow(clippy::panic)]
    fn handle(&mut self, _: InjectPanic, _: &mut Self::Context) {
        if self.fault_injection {
            panic!(
                "fault injection: escrow {} panics on request",
                self.escrow_id()
            );
        }
    }
}

impl Handler<InjectStall> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: InjectStall, ctx: &mut Self::Context) {
        if self.fault_injection {
            warn!(self.log, "fault injection: the mailbox stalls"; "stage" => "fault_injected",
                "stall_ms" => msg.ms);
            let stall = tokio::time::sleep(Duration::from_millis(msg.ms));
            ctx.wait(stall.into_actor(self));
        }
    }
}

impl EscrowActor {
    fn snapshot(&self) -> EscrowSnapshot {
        let sm = self.session.state();
        EscrowSnapshot {
            escrow_id: self.escrow_id().to_string(),
            model: self.session.info().model.clone(),
            nonce: self.session.nonce(),
            phase: format!("{:?}", sm.phase()).to_lowercase(),
            state_root: hex::encode(sm.state_root()),
            balance: sm.balance(),
            durable_nonce: self.durable_nonce,
            host_sync: self
                .session
                .host_syncs()
                .iter()
                .map(|(a, n)| (a.to_string(), *n))
                .collect(),
            pending_txs: self.session.pending().len(),
            waiting_races: self.waiting.len(),
            attempts_in_flight: self.attempts.values().filter(|e| e.is_in_flight()).count(),
            pending_finishes: self
                .attempts
                .values()
                .filter(|e| e.is_pending_finish())
                .map(|e| e.nonce)
                .collect(),
            pending_timeouts: self
                .attempts
                .values()
                .filter(|e| e.is_awaiting_timeout())
                .map(|e| e.nonce)
                .collect(),
            repairs: self.repairs.keys().map(ToString::to_string).collect(),
            repairs_given_up: self.gave_up.iter().map(ToString::to_string).collect(),
            panic_mode: self.panic_mode,
            signatures: self
                .session
                .signatures()
                .iter()
                .map(|(a, s)| (a.to_string(), s.nonce))
                .collect(),
        }
    }
}
