//! `ChainPoller`: one per public-API host; every escrow and the HTTP edge read its snapshots, so
//! the chain is polled once per process whatever the number of escrows (single flight: one
//! request per endpoint at a time, and reads never cause requests).
//!
//! - **Owns** the last-known-good snapshots of `epochs/latest`, `epochs/current/participants` and
//!   each miner's `/v1/versions` (a versions poller per miner: its own timer, snapshot and
//!   status), the block-time estimate, and the subscriber list.
//! - **Shares** the per-host request budget and 429/503 back-off ([`HostGates`]) with every other
//!   poller the caller gave the same gates.
//! - **Survives a restart**: nothing of its own; snapshots are refetched within one interval. The
//!   budget windows and back-off deadlines live in the caller's `HostGates`, so a poller started
//!   again with the same gates still honours them (invariant 10 holds across restarts).
//! - **Timers**: one per endpoint (`poll <endpoint>[ <miner>]`: next poll, or the end of a
//!   budget/back-off wait) and the 5 s `housekeeping` interval (staleness transitions, age and
//!   back-off gauges), each shown with its due time in the poller's stats. No timer ever sends a
//!   request without passing the host's gate.
//! - **Who holds its `Addr`**: the process (HTTP edge: admission, settings, debug), as a counted
//!   [`crate::stats::TrackedAddr`]; listed in the actor registry as `chain_poller` `public_api`.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use actix::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use slog::{info, o, Logger};

use super::{
    budget::HostGates,
    messages::{
        ApplyPollSettings, ChainChange, ChainChanged, GetSnapshot, SetVersionsScope, StopPoller,
        Subscribe,
    },
    metrics::ChainMetrics,
    schedule::{authority, Endpoint, Target},
    settings::{ChainPollSettings, SettingsError},
    view::{BlockClock, EpochSnapshot, ParticipantsSnapshot, VersionsSnapshot},
};
use crate::{
    clock::SharedClock,
    stats::{timers, tracked_actor, ActorRegistry, Kind, StatsSlot},
};

/// The poller's id in the actor registry (one per process).
pub const POLLER_ID: &str = "public_api";

/// Staleness checks and gauge updates.
pub const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(5);

/// What a poller is given.
#[derive(Debug, Clone)]
pub struct ChainPollerDeps {
    pub clock: SharedClock,
    pub log: Logger,
    pub metrics: ChainMetrics,
    /// Budget and back-off per host; share one `HostGates` between every poller of the process.
    pub gates: HostGates,
    /// Where the poller registers its stats (debug listing).
    pub actors: ActorRegistry,
}

/// Why a poller could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainPollerError {
    #[error("public API URL `{0}` has no host")]
    BadUrl(String),
    #[error(transparent)]
    Settings(#[from] SettingsError),
}

/// The chain poller (see the module docs).
pub struct ChainPoller {
    pub(super) api: String,
    pub(super) api_host: String,
    pub(super) settings: ChainPollSettings,
    pub(super) gates: HostGates,
    pub(super) clock: SharedClock,
    pub(super) log: Logger,
    pub(super) metrics: ChainMetrics,
    pub(super) rng: StdRng,
    pub(super) epochs: Endpoint,
    pub(super) participants: Endpoint,
    /// Miner address → its versions poller.
    pub(super) miners: BTreeMap<String, Endpoint>,
    pub(super) epoch: Option<EpochSnapshot>,
    pub(super) block_clock: BlockClock,
    pub(super) participant_list: Option<ParticipantsSnapshot>,
    pub(super) versions: BTreeMap<String, VersionsSnapshot>,
    pub(super) scope: Option<BTreeSet<String>>,
    pub(super) subscribers: Vec<Recipient<ChainChanged>>,
    pub(super) stats: StatsSlot,
}

impl ChainPoller {
    /// A poller of `public_api` (base URL, e.g. `http://node:8000`), not started yet.
    pub fn new(
        public_api: &str,
        settings: ChainPollSettings,
        deps: ChainPollerDeps,
    ) -> Result<ChainPoller, ChainPollerError> {
        settings.validate()?;
        let api = public_api.trim_end_matches('/').to_owned();
        let api_host = authority(&api).ok_or_else(|| ChainPollerError::BadUrl(api.clone()))?;
        let now = deps.clock.now_ms();
        let log = deps
            .log
            .new(o!("actor" => "chain_poller", "api" => api_host.clone()));
        deps.gates.apply(&settings);
        let labels = [("api", api_host.clone())].into_iter().collect();
        let stats = deps
            .actors
            .register_with(Kind::ChainPoller, POLLER_ID, labels, &deps.clock);
        Ok(ChainPoller {
            stats,
            epochs: Endpoint::new(
                Target::Epochs,
                format!("{api}/v1/epochs/latest"),
                &api_host,
                now,
            ),
            participants: Endpoint::new(
                Target::Participants,
                format!("{api}/v1/epochs/current/participants"),
                &api_host,
                now,
            ),
            api,
            api_host,
            settings,
            gates: deps.gates,
            clock: deps.clock,
            log,
            metrics: deps.metrics,
            rng: StdRng::from_entropy(),
            miners: BTreeMap::new(),
            epoch: None,
            block_clock: BlockClock::default(),
            participant_list: None,
            versions: BTreeMap::new(),
            scope: None,
            subscribers: Vec::new(),
        })
    }

    /// Seeds the jitter (deterministic tests).
    pub fn with_seed(mut self, seed: u64) -> ChainPoller {
        self.rng = StdRng::seed_from_u64(seed);
        self
    }

    pub(super) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// `interval_ms` drawn uniformly within ± the jitter percentage.
    pub(super) fn jittered(&mut self, interval_ms: u64) -> i64 {
        let j = f64::from(self.settings.poll_jitter_percent) / 100.0;
        let factor = if j > 0.0 {
            self.rng.gen_range((1.0 - j)..=(1.0 + j))
        } else {
            1.0
        };
        (interval_ms as f64 * factor).round() as i64
    }

    /// Uniform in `0..=max_ms` (spreads the first versions polls).
    pub(super) fn spread(&mut self, max_ms: u64) -> i64 {
        i64::try_from(self.rng.gen_range(0..=max_ms)).unwrap_or(0)
    }

    /// Pushes `changes` with a fresh view to every live subscriber.
    pub(super) fn notify(&mut self, changes: Vec<ChainChange>) {
        if changes.is_empty() {
            return;
        }
        self.subscribers.retain(|s| s.connected());
        if self.subscribers.is_empty() {
            return;
        }
        let view = Arc::new(self.view(self.now()));
        for s in &self.subscribers {
            s.do_send(ChainChanged {
                view: Arc::clone(&view),
                changes: changes.clone(),
            });
        }
    }
}

impl Actor for ChainPoller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(256);
        let now = self.now();
        info!(self.log, "chain poller started";
            "stage" => "chain_poller_started",
            "phase_interval_ms" => self.settings.chain_phase_poll_interval_ms,
            "participants_interval_ms" => self.settings.participants_poll_interval_ms,
            "versions_interval_ms" => self.settings.versions_poll_interval_ms,
            "budget_per_minute" => self.settings.public_api_requests_per_minute);
        self.arm(Target::Epochs, now, ctx);
        self.arm(Target::Participants, now, ctx);
        let stats = self.stats.clone();
        let _ = timers::run_interval(
            &stats,
            ctx,
            "housekeeping",
            HOUSEKEEPING_INTERVAL,
            |act, _| {
                let now = act.now();
                let changes = act.refresh_health(now);
                act.notify(changes);
            },
        );
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        info!(self.log, "chain poller stopped"; "stage" => "chain_poller_stopped");
    }
}

tracked_actor!(ChainPoller);

impl Handler<GetSnapshot> for ChainPoller {
    type Result = MessageResult<GetSnapshot>;

    fn handle(&mut self, _: GetSnapshot, _: &mut Context<Self>) -> Self::Result {
        MessageResult(Arc::new(self.view(self.now())))
    }
}

impl Handler<Subscribe> for ChainPoller {
    type Result = ();

    fn handle(&mut self, msg: Subscribe, _: &mut Context<Self>) {
        let view = Arc::new(self.view(self.now()));
        msg.0.do_send(ChainChanged {
            view,
            changes: vec![ChainChange::Subscribed],
        });
        self.subscribers.push(msg.0);
    }
}

impl Handler<ApplyPollSettings> for ChainPoller {
    type Result = Result<(), SettingsError>;

    fn handle(&mut self, msg: ApplyPollSettings, ctx: &mut Context<Self>) -> Self::Result {
        let new = msg.0;
        new.validate()?;
        if new == self.settings {
            return Ok(());
        }
        info!(self.log, "chain poll settings applied";
            "stage" => "chain_poll_settings_applied",
            "phase_interval_ms" => new.chain_phase_poll_interval_ms,
            "participants_interval_ms" => new.participants_poll_interval_ms,
            "versions_interval_ms" => new.versions_poll_interval_ms,
            "budget_per_minute" => new.public_api_requests_per_minute,
            "poc_request_mode" => %new.poc_request_mode);
        self.gates.apply(&new);
        self.settings = new;
        self.rearm_all(ctx);
        self.notify(vec![ChainChange::SettingsApplied]);
        Ok(())
    }
}

impl Handler<SetVersionsScope> for ChainPoller {
    type Result = ();

    fn handle(&mut self, msg: SetVersionsScope, ctx: &mut Context<Self>) {
        self.scope = msg.0;
        self.sync_miners(ctx);
    }
}

impl Handler<StopPoller> for ChainPoller {
    type Result = ();

    fn handle(&mut self, _: StopPoller, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
