//! Actor statistics that the debug endpoint reads **without messaging the actors**, so that a
//! listing answers at once even when an actor is stuck (that actor still shows, with a growing
//! mailbox depth).
//!
//! - [`ActorStats`]: per actor, lock-free counters (messages enqueued, dequeued, handled, the
//!   time of the last one, from the injected clock) and the armed timers with their due times.
//! - [`ActorRegistry`]: the live actors of one gateway (a cheap handle passed down with the other
//!   dependencies, so every test world has its own). An actor registers when it is built and
//!   leaves when it is dropped ([`StatsSlot`]), panics included; a respawned actor starts with
//!   fresh stats.
//! - [`TrackedAddr`] / [`TrackedRecipient`] (`tracked.rs`): what senders hold instead of
//!   `Addr`/`Recipient`; every message travels as [`Tracked<M>`] with a ticket that counts it in
//!   when sent and out when the mailbox lets go of it (handled, skipped because its requester left,
//!   or dropped), so `mailbox_depth = enqueued − dequeued` is exact.
//! - [`timers`]: `run_later`/`run_interval` that record their name and due time while armed.
//!
//! actix has no public mailbox-length API, hence the counting at the edges of the mailbox.

pub mod timers;
mod tracked;

use std::{
    collections::BTreeMap,
    fmt,
    sync::{
        atomic::{AtomicI64, AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError, Weak,
    },
};

use actix::{Actor, AsyncContext, Context, Handler, Message, WeakRecipient};
use serde::Serialize;

pub(crate) use self::tracked::tracked_actor;
pub use self::tracked::{Tracked, TrackedAddr, TrackedRecipient, TrackedResponse};
use crate::clock::SharedClock;

/// The kinds of actors the registry lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Directory,
    Escrow,
    Participant,
    Race,
    Repair,
    ChainPoller,
}

impl Kind {
    /// The kind's name in the debug API (`directory`, `escrow`, …, `chain_poller`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Directory => "directory",
            Kind::Escrow => "escrow",
            Kind::Participant => "participant",
            Kind::Race => "race",
            Kind::Repair => "repair",
            Kind::ChainPoller => "chain_poller",
        }
    }
}

/// Asks an actor for its full debug state (`GET /v1/debug/actors/{kind}/{id}`). Actors that
/// answer it offer themselves with [`TrackedActor::offer_description`]; the probe is counted like
/// any other message and sent with a deadline.
#[derive(Debug, Message)]
#[rtype(result = "serde_json::Value")]
pub struct Describe;

/// `last_message_ms` before the first message.
const NEVER: i64 = i64::MIN;

/// One armed timer.
#[derive(Debug, Clone, Copy)]
struct TimerEntry {
    due_ms: i64,
    /// Which arming this is: a stale timer firing never clears a newer one of the same name.
    generation: u64,
}

/// Statistics of one actor (see the module docs). Shared by the actor and every address of it.
pub struct ActorStats {
    kind: Kind,
    id: String,
    /// Fixed facts shown with the actor (a race's escrow and request id, …).
    labels: BTreeMap<&'static str, String>,
    clock: SharedClock,
    started_ms: i64,
    enqueued: AtomicU64,
    dequeued: AtomicU64,
    handled: AtomicU64,
    last_message_ms: AtomicI64,
    generations: AtomicU64,
    /// Armed timers by name. A small lock: held only to insert, remove or copy a few entries.
    timers: Mutex<BTreeMap<String, TimerEntry>>,
    /// Where [`Describe`] probes go, if the actor answers them. Weak: the stats must keep neither
    /// the actor alive nor themselves (the actor owns its stats).
    describer: Mutex<Option<WeakRecipient<Tracked<Describe>>>>,
}

impl fmt::Debug for ActorStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorStats")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl ActorStats {
    fn new(
        kind: Kind,
        id: String,
        labels: BTreeMap<&'static str, String>,
        clock: SharedClock,
    ) -> ActorStats {
        ActorStats {
            kind,
            id,
            labels,
            started_ms: clock.now_ms(),
            clock,
            enqueued: AtomicU64::new(0),
            dequeued: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            last_message_ms: AtomicI64::new(NEVER),
            generations: AtomicU64::new(0),
            timers: Mutex::new(BTreeMap::new()),
            describer: Mutex::new(None),
        }
    }

    /// A counted recipient of [`Describe`] probes while the actor runs and answers them.
    pub fn describer(self: &Arc<Self>) -> Option<TrackedRecipient<Describe>> {
        let weak = self
            .describer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        Some(TrackedRecipient::from_parts(weak.upgrade()?, self.clone()))
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Messages sent and not yet taken out of the mailbox.
    pub fn mailbox_depth(&self) -> u64 {
        let out = self.dequeued.load(Ordering::Acquire);
        self.enqueued.load(Ordering::Acquire).saturating_sub(out)
    }

    /// Messages whose handler ran.
    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }

    /// When the last message was handled (unix ms), if any was.
    pub fn last_message_ms(&self) -> Option<i64> {
        Some(self.last_message_ms.load(Ordering::Relaxed)).filter(|t| *t != NEVER)
    }

    pub(crate) fn note_enqueued(&self) {
        self.enqueued.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn note_dequeued(&self) {
        self.dequeued.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn note_handled(&self) {
        self.handled.fetch_add(1, Ordering::Relaxed);
        self.last_message_ms
            .store(self.clock.now_ms(), Ordering::Relaxed);
    }

    fn timers(&self) -> MutexGuard<'_, BTreeMap<String, TimerEntry>> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records timer `name` as due at `due_ms`; returns the arming's generation.
    pub fn arm_timer(&self, name: impl Into<String>, due_ms: i64) -> u64 {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        self.timers()
            .insert(name.into(), TimerEntry { due_ms, generation });
        generation
    }

    /// Moves the due time of an armed timer (an interval's next tick).
    pub fn reschedule_timer(&self, name: &str, generation: u64, due_ms: i64) {
        if let Some(e) = self.timers().get_mut(name) {
            if e.generation == generation {
                e.due_ms = due_ms;
            }
        }
    }

    /// Forgets timer `name` (fired or cancelled), unless it was armed again since.
    pub fn disarm_timer(&self, name: &str, generation: u64) {
        let mut timers = self.timers();
        if timers.get(name).is_some_and(|e| e.generation == generation) {
            timers.remove(name);
        }
    }

    /// Now, by the injected clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A serializable copy (`now_ms` gives each timer's `due_in_ms`).
    pub fn view(&self, now_ms: i64) -> StatsView {
        let mut timers: Vec<TimerView> = self
            .timers()
            .iter()
            .map(|(name, e)| TimerView {
                name: name.clone(),
                due_at: e.due_ms,
                due_in_ms: e.due_ms.saturating_sub(now_ms),
            })
            .collect();
        timers.sort_by(|a, b| a.due_at.cmp(&b.due_at).then(a.name.cmp(&b.name)));
        StatsView {
            kind: self.kind,
            id: self.id.clone(),
            labels: self.labels.clone(),
            started_at: self.started_ms,
            mailbox_depth: self.mailbox_depth(),
            messages_enqueued: self.enqueued.load(Ordering::Relaxed),
            messages_handled: self.handled(),
            last_message_at: self.last_message_ms(),
            timers,
        }
    }
}

/// What the debug listing shows of an actor's stats.
#[derive(Debug, Clone, Serialize)]
pub struct StatsView {
    pub kind: Kind,
    pub id: String,
    pub labels: BTreeMap<&'static str, String>,
    /// When the actor was built (unix ms).
    pub started_at: i64,
    pub mailbox_depth: u64,
    pub messages_enqueued: u64,
    pub messages_handled: u64,
    /// Unix ms of the last handled message.
    pub last_message_at: Option<i64>,
    /// Armed timers, soonest first.
    pub timers: Vec<TimerView>,
}

/// One armed timer in a [`StatsView`].
#[derive(Debug, Clone, Serialize)]
pub struct TimerView {
    pub name: String,
    /// Unix ms.
    pub due_at: i64,
    pub due_in_ms: i64,
}

#[derive(Default)]
struct Live {
    next: u64,
    actors: BTreeMap<u64, Arc<ActorStats>>,
}

/// The live actors of one gateway (see the module docs). Cheap to clone.
#[derive(Clone, Default)]
pub struct ActorRegistry {
    live: Arc<Mutex<Live>>,
}

impl fmt::Debug for ActorRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorRegistry")
            .field("actors", &self.len())
            .finish()
    }
}

fn lock(live: &Mutex<Live>) -> MutexGuard<'_, Live> {
    live.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ActorRegistry {
    /// Registers an actor being built; it stays listed until the returned slot is dropped.
    pub fn register(&self, kind: Kind, id: impl Into<String>, clock: &SharedClock) -> StatsSlot {
        self.register_with(kind, id, BTreeMap::new(), clock)
    }

    /// [`ActorRegistry::register`] with fixed labels.
    pub fn register_with(
        &self,
        kind: Kind,
        id: impl Into<String>,
        labels: BTreeMap<&'static str, String>,
        clock: &SharedClock,
    ) -> StatsSlot {
        let stats = Arc::new(ActorStats::new(kind, id.into(), labels, clock.clone()));
        let mut live = lock(&self.live);
        let serial = live.next;
        live.next = live.next.wrapping_add(1);
        live.actors.insert(serial, stats.clone());
        StatsSlot {
            serial,
            registry: Arc::downgrade(&self.live),
            stats,
        }
    }

    /// Every live actor's stats, in registration order.
    pub fn list(&self) -> Vec<Arc<ActorStats>> {
        lock(&self.live).actors.values().cloned().collect()
    }

    /// Live actors.
    pub fn len(&self) -> usize {
        lock(&self.live).actors.len()
    }

    /// True when no actor is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An actor's registration: owned by the actor, it unlists the actor when dropped (the actor
/// stopped, or its task panicked). Derefs to the actor's [`ActorStats`].
pub struct StatsSlot {
    serial: u64,
    registry: Weak<Mutex<Live>>,
    stats: Arc<ActorStats>,
}

impl std::ops::Deref for StatsSlot {
    type Target = Arc<ActorStats>;

    fn deref(&self) -> &Arc<ActorStats> {
        &self.stats
    }
}

impl Drop for StatsSlot {
    fn drop(&mut self) {
        if let Some(live) = self.registry.upgrade() {
            lock(&live).actors.remove(&self.serial);
        }
    }
}

/// An actor with [`ActorStats`]: it is started and addressed through [`TrackedAddr`]s.
pub trait TrackedActor: Actor<Context = Context<Self>> {
    /// This actor's stats.
    fn stats(&self) -> &Arc<ActorStats>;

    /// Starts the actor on the current arbiter; the address counts what it sends.
    fn start_tracked(self) -> TrackedAddr<Self> {
        let stats = self.stats().clone();
        TrackedAddr::new(self.start(), stats)
    }

    /// Lets the debug endpoint send this actor [`Describe`] probes (call from `started`).
    fn offer_description(&self, ctx: &Context<Self>)
    where
        Self: Handler<Tracked<Describe>>,
    {
        let weak = ctx.address().downgrade().recipient();
        *self
            .stats()
            .describer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(weak);
    }

    /// The actor's own counted address (for its tasks and the actors it starts).
    fn tracked_address(&self, ctx: &Context<Self>) -> TrackedAddr<Self> {
        TrackedAddr::new(ctx.address(), self.stats().clone())
    }
}

#[cfg(test)]
mod tests;
