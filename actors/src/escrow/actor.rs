//! `EscrowActor`: one per escrow. Owns the protocol session and six parts, each with private
//! state in its own file (see the table in `escrow/mod.rs`): the nonce picker, the nonce book,
//! the durability path, the fault guard, host routing and the reachability gate. This file
//! keeps only the actor itself: its construction and life cycle, the timers, and the execution
//! of what the parts decide (futures to spawn, timers to arm, outcomes to send). The handlers
//! are in `mailbox.rs`, the pump that grants nonces in `granting.rs`.
//!
//! - **Who holds its `Addr`**: the `Directory` (and races, for the duration of one request).
//! - **Survives a restart**: nothing in memory is trusted after the actor stopped (a recoverable
//!   fault such as a failed fsync stops it; a panic kills it): the `Directory` respawns it from
//!   the store: the diff log replays into a fresh session, sync nonces come from their record, and
//!   every nonce that was handed out without a finish or timeout in the log is re-registered so it
//!   is still settled (finish reconciliation, then timeout votes). In memory the session keeps
//!   only the newest `diff_window` diffs; older ones stay in the store (`diff_log.rs`).
//! - **Timers** (named as in its stats, `GET /v1/debug/actors`): `picker_hold` (a nonce nobody
//!   may take waits `picker_hold_ms` before it is withheld), `nonce <n>` per unsettled nonce
//!   (finish reconciliation poll or timeout deadline), `fault_release` (held host faults confirmed
//!   by the correlation guard), `timeout_batch` (confirmed timeouts that no request's diff carried
//!   within `timeout_tx_batch_ms`, `actor/voting.rs`), `background_catch_up_retry` (`actor/background.rs`), and the 1 s `sync_persist` interval (dirty host sync nonces, the
//!   budget the directory's pick reads, the urgent repairs of an escrow with no routable
//!   host, the deletion of settled nonces' refused-timeout payloads, `actor/payloads.rs`, and
//!   the compaction of an escrow idle for 5 s: its encoded diffs dropped, its in-memory diffs
//!   cut to the newest; hosts behind read older ones from the store; and the keep-warm round of
//!   the host furthest behind, `actor/background.rs`).
//! - **Stats**: its mailbox depth and message counts are counted by the [`TrackedAddr`](crate::stats::TrackedAddr)s that
//!   every sender holds; a respawned actor starts with fresh stats.
//! - **Durable before visible**: a grant is answered only after the store acknowledged its diff
//!   (`durable.rs`).

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{debug, info, o, Logger};

use super::{
    book::{Deadlines, NonceBook},
    budget::BudgetCell,
    config::EscrowConfig,
    durable::Durable,
    error::EscrowError,
    guard::FaultGuard,
    links::Links,
    nonces::NonceEntry,
    picker::Picker,
    reach::Reachability,
    routing::Routing,
    session::Session,
    vote_queue::VoteLimits,
};
use crate::{
    clock::SharedClock,
    directory::{ActorKind, Died, StopCause},
    metrics::ActorMetrics,
    outcome::OutcomeSink,
    policy::settings::HealthSettings,
    protocol::{
        crypto::{Address, SigningKey},
        warm::WarmKeyChecker,
    },
    stats::{timers, tracked_actor, ActorRegistry, Kind, StatsSlot, TrackedRecipient},
    store::SharedStore,
};

mod background;
mod finalize;
mod granting;
mod mailbox;
pub(crate) mod payloads;
mod reaching;
mod repairs;
mod resending;
mod settling;
mod syncing;
mod voting;
mod warm;

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
    /// Warm-key grant checks (the cache is also the session's step-4 resolver).
    pub warm: WarmKeyChecker,
    /// Where this actor publishes its balance, nonce and readiness for the directory's pick.
    pub budget: BudgetCell,
}

/// The escrow actor (see the module docs).
pub struct EscrowActor {
    session: Session,
    /// Dependencies (its logger tagged with the escrow; its settings follow live changes).
    deps: EscrowDeps,
    picker: Picker,
    book: NonceBook,
    durable: Durable,
    guard: FaultGuard,
    routing: Routing,
    /// Hosts refusing connections get no nonces but for probes (`escrow/reach/mod.rs`).
    reach: Reachability,
    /// Told when this actor stops, so the directory can respawn it.
    on_stop: Option<TrackedRecipient<Died>>,
    /// Set by `Retire`: the stop is final and nobody should respawn the actor.
    retired: bool,
    /// Why the actor stops, told to the directory (a database outage is not charged).
    stop_cause: StopCause,
    /// Set by `BeginDrain` / `FinalizeRound`: settling, no new requests (`actor/finalize.rs`).
    closing: bool,
    /// When a timeout vote last asked for a sync (`actor/voting.rs`).
    last_sync_kick_ms: Option<i64>,
    /// Resends waiting for their host's catch-up in another attempt (`actor/resending.rs`).
    parked_resends: Vec<resending::ParkedResend>,
    /// Far verifiers whose catch-up a running vote carries (one vote at a time each).
    vote_carrying: std::collections::BTreeSet<Address>,
    /// Armed while confirmed timeouts wait for a diff to carry them (`actor/voting.rs`).
    timeout_batch: Option<timers::Timer>,
    /// This actor's entry in the actor registry (mailbox, messages, timers).
    stats: StatsSlot,
}

impl EscrowActor {
    /// A new actor over a session (fresh or restored).
    pub fn new(session: Session, mut deps: EscrowDeps) -> EscrowActor {
        let session = session.with_diff_window(deps.cfg.diff_window);
        let info = session.info().clone();
        let stats = deps
            .actors
            .register(Kind::Escrow, info.escrow_id.clone(), &deps.clock);
        deps.log = deps.log.new(o!("escrow" => info.escrow_id.clone()));
        let deadlines = Deadlines {
            refusal_timeout_s: info.config.refusal_timeout,
            execution_timeout_s: info.config.execution_timeout,
            buffer_ms: deps.cfg.timeout_buffer_ms,
        };
        let hosts = info.hosts.iter().map(|h| h.address.clone()).collect();
        let (log, metrics) = (deps.log.clone(), deps.metrics.clone());
        EscrowActor {
            picker: Picker::new(deps.cfg.max_waiting),
            book: NonceBook::new(deadlines, VoteLimits::of(&deps.cfg), log.clone()),
            durable: Durable::new(
                session.nonce(),
                session.diff_window(),
                Links::new(deps.cfg.links(), metrics.clone(), log.clone()),
            ),
            guard: FaultGuard::new(&deps.settings, log.clone(), metrics.clone()),
            routing: Routing::new(hosts, &deps.settings, log, metrics),
            reach: Reachability::new(deps.cfg.reach()),
            session,
            deps,
            on_stop: None,
            retired: false,
            stop_cause: StopCause::Failed,
            closing: false,
            last_sync_kick_ms: None,
            parked_resends: Vec::new(),
            vote_carrying: std::collections::BTreeSet::new(),
            timeout_batch: None,
            stats,
        }
    }

    /// Tells `recipient` when the actor stops (panics included).
    pub fn with_death_notice(mut self, recipient: TrackedRecipient<Died>) -> Self {
        self.on_stop = Some(recipient);
        self
    }

    /// Registers nonces restored from the log that still need settling.
    /// Each has its payload record in the store (`actor/payloads.rs`), deleted once it settled.
    pub fn with_orphans(mut self, orphans: Vec<NonceEntry>) -> Self {
        for entry in orphans {
            let nonce = entry.nonce;
            self.book.insert(entry);
            self.book.keep_payload(nonce);
        }
        self
    }

    fn escrow_id(&self) -> &str {
        &self.session.info().escrow_id
    }

    fn now_ms(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    /// Checks and takes a host's receipt or state report, its root read back from the store
    /// first when it left memory (`diff_log::recall_root`).
    fn take_report(
        &mut self,
        host: &Address,
        inference: Option<u64>,
        body: &crate::protocol::wire::ReceiptBody,
    ) -> Result<(), crate::escrow::session::SessionError> {
        super::diff_log::recall_root(&self.session, &self.deps, body.nonce);
        self.session.process_receipt(host, inference, body)
    }

    /// Publishes balance, nonce and readiness for the directory's pick; `started` is the request
    /// whose start the session now carries (its reservation ends).
    fn publish_budget(&self, started: Option<&str>) {
        let st = self.session.state();
        let active = !self.closing && st.phase() == crate::protocol::state::Phase::Active;
        self.deps.budget.publish(
            st.balance().saturating_add(self.session.pending_refunds()),
            self.session.nonce(),
            u64::try_from(self.book.len()).unwrap_or(u64::MAX),
            active,
            !self.routing.none_routable(),
            started,
        );
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
            |act, ctx| {
                act.durable.persist_syncs(&act.session, &act.deps);
                act.durable.checkpoint(&act.session, &act.deps);
                act.compact_when_idle();
                act.drop_settled_payloads();
                act.requeue_lost_timeouts(ctx);
                // With no routable host the pick refuses this escrow, so no request waits here
                // to kick the repairs: the 1 s tick does (the kicks are at least 500 ms apart, so a kick
                // by a waiting request just before never makes the tick skip; `routing.rs`).
                let now = act.now_ms();
                act.routing.kick_repairs(now);
                act.keep_hosts_warm(ctx);
                act.publish_budget(None);
            },
        );
        self.publish_budget(None);
        for nonce in self.book.nonces() {
            self.arm_nonce_timer(nonce, ctx);
        }
        info!(self.deps.log, "escrow actor started"; "stage" => "escrow_started",
            "nonce" => self.session.nonce(), "unsettled" => self.book.len());
    }

    fn stopping(&mut self, _: &mut Self::Context) -> Running {
        let id = self.escrow_id().to_string();
        self.picker.fail_all(&EscrowError::ShuttingDown(id));
        self.durable.persist_syncs(&self.session, &self.deps);
        self.routing.stop_repairs();
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
                cause: self.stop_cause,
            });
        }
    }
}

tracked_actor!(EscrowActor);

/// Diffs an idle escrow keeps in memory (its newest; the rest are in the store).
const IDLE_DIFF_WINDOW: usize = 1;

impl EscrowActor {
    /// An escrow that went idle lets go of its encoded diffs and of all but its newest diff in
    /// memory: memory that does not grow with the number of idle escrows' unacknowledged diffs.
    fn compact_when_idle(&mut self) {
        if !self.durable.went_idle(self.session.nonce()) {
            return;
        }
        let held = self.session.held_diffs();
        self.session.compact_window(IDLE_DIFF_WINDOW);
        self.deps.metrics.idle_compactions.inc();
        debug!(self.deps.log, "idle escrow compacted"; "stage" => "escrow_idle_compacted",
            "nonce" => self.session.nonce(), "held_before" => held,
            "held" => self.session.held_diffs());
    }
}
