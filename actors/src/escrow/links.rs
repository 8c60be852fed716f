//! Per-link pacing of inference bodies (issue 16): what bounds how far bodies can overtake each
//! other on their way to one host, so that admission needs no global slot per stream.
//!
//! A body for nonce `n` carries the diffs above `after` (`session/sync_points.rs`: the newest
//! `catch_up_window` diffs and whatever the host was never sent), so the host must hold `after`
//! when it arrives. What it holds up to `after` reached it in the bodies sent to it before, up to
//! and including the first one above `after`: body `n` *depends* on those. Bodies to one host
//! travel as separate requests and can arrive out of order (link jitter, scheduling), so body
//! `n` leaves only once every body it depends on left at least the link's **reorder horizon**
//! ago, the time by which a later body can overtake an earlier one ([`gate`], a pure rule). So
//! at most about `catch_up_window / hosts` bodies leave one link per horizon, and within that,
//! overtaking is absorbed by the window; a slow or remote host costs no global slot.
//!
//! The horizon is learnt per link. It starts at `link_reorder_min_ms`, its floor. A nonce gap
//! that shows overtaking (the host holds less than body `n` needed, and the body that carried
//! what is missing left `d` before body `n`) raises it to `max(1.5 · horizon, 1.25 · d, 5 ms)`
//! (at most `link_reorder_max_ms`), once per raise: a gap of a body sent before the last raise
//! is old news (as TCP reacts once per window). Above the floor it halves every
//! `link_reorder_half_life_ms` after its last raise. A body waits at most `link_max_wait_ms`,
//! then leaves anyway (a gap is then recovered by the attempt's resend, as before). Without
//! pacing (`link_pacing = false`) every body leaves at once.
//!
//! Shared by the escrow actor (it registers each grant's body, in nonce order, when it composes
//! the diff: [`Links::register`]) and the attempt tasks on the HTTP workers (each waits for its
//! body's turn: [`LinkTicket::ready`]); one mutex per escrow. A waiter blocked on an earlier body
//! not sent yet is woken when that body leaves or is dropped (its race gave up). Visible in the
//! escrow's snapshot (`/v1/debug/actors/escrow/{id}`: [`LinkView`]), metrics
//! `devshard_link_wait_seconds{result}` and `devshard_link_overtaken_total`, log stages
//! `link_paced` (debug), `link_wait_expired` and `link_overtaken`. Nothing survives a restart:
//! a respawned escrow starts with fresh links.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::Duration,
};

use serde::Serialize;
use slog::{debug, info, Logger};
use tokio::{sync::Notify, time::Instant};

use crate::{metrics::ActorMetrics, protocol::crypto::Address};

/// A raised horizon is at least the overtaking measured times this …
const MARGIN: f64 = 1.25;
/// … and at least the horizon it replaces times this …
const RAISE: f64 = 1.5;
/// … and at least this.
const MIN_RAISE: Duration = Duration::from_millis(5);
/// Sent bodies are remembered this long at least, so a gap reported a round trip later can
/// still measure by how much its body overtook the one it depended on.
const KEEP_SENT: Duration = Duration::from_secs(3);

/// `[escrow] link_*`, as the escrow actor uses them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSettings {
    pub enabled: bool,
    /// The horizon at start, and its floor.
    pub min: Duration,
    pub max: Duration,
    pub half_life: Duration,
    pub max_wait: Duration,
}

/// What a body waits for ([`gate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// It may leave now.
    Go,
    /// The last body it depends on left too recently: it may leave at this instant.
    Until(Instant),
    /// It depends on the body of this nonce, which has not left yet.
    Behind(u64),
}

/// The pacing rule. `bodies` are the link's registered bodies in nonce order (`None`: not sent
/// yet); body `nonce` needs the host to hold `after`. It depends on every body before it up to
/// and including the first one above `after`, and leaves once they all left `horizon` ago.
pub fn gate(
    bodies: impl IntoIterator<Item = (u64, Option<Instant>)>,
    nonce: u64,
    after: u64,
    horizon: Duration,
    now: Instant,
) -> Gate {
    let mut latest: Option<Instant> = None;
    for (n, sent) in bodies {
        if n >= nonce {
            break;
        }
        match sent {
            None => return Gate::Behind(n),
            Some(t) => latest = Some(latest.map_or(t, |l| l.max(t))),
        }
        if n > after {
            break;
        }
    }
    match latest.map(|t| t + horizon) {
        Some(due) if due > now => Gate::Until(due),
        _ => Gate::Go,
    }
}

/// One link's state in `/v1/debug/actors/escrow/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkView {
    pub host: String,
    /// The learnt reorder horizon now (ms).
    pub reorder_horizon_ms: f64,
    /// Bodies registered and not sent yet (their attempts wait or are about to start).
    pub unsent: usize,
    /// Attempts waiting for their body's turn now.
    pub waiting: usize,
    /// Bodies that waited for their turn, since the escrow started.
    pub paced: u64,
    /// Bodies that left after `link_max_wait_ms` without their turn.
    pub expired: u64,
    /// Nonce gaps that showed overtaking (each may raise the horizon).
    pub overtaken: u64,
}

struct Body {
    nonce: u64,
    sent: Option<Instant>,
    wake: Arc<Notify>,
}

struct Link {
    bodies: VecDeque<Body>,
    /// The horizon as last raised, and when.
    raised: (Duration, Instant),
    waiting: usize,
    paced: u64,
    expired: u64,
    overtaken: u64,
}

impl Link {
    fn horizon(&self, s: &LinkSettings, now: Instant) -> Duration {
        let (h, at) = self.raised;
        let halvings =
            now.saturating_duration_since(at).as_secs_f64() / s.half_life.as_secs_f64().max(1e-3);
        h.mul_f64(0.5f64.powf(halvings)).max(s.min)
    }

    fn position(&self, nonce: u64) -> Option<usize> {
        self.bodies.binary_search_by_key(&nonce, |b| b.nonce).ok()
    }

    /// Marks body `nonce` sent now, wakes who waits for it, forgets bodies sent long ago.
    fn sent(&mut self, nonce: u64, keep: Duration, now: Instant) {
        if let Some(b) = self.position(nonce).and_then(|i| self.bodies.get_mut(i)) {
            b.sent = Some(now);
            b.wake.notify_waiters();
        }
        while let Some(Body { sent: Some(t), .. }) = self.bodies.front() {
            if now.saturating_duration_since(*t) <= keep {
                break;
            }
            self.bodies.pop_front();
        }
    }
}

struct Shared {
    settings: LinkSettings,
    links: Mutex<BTreeMap<Address, Link>>,
    metrics: ActorMetrics,
    log: Logger,
}

/// One escrow's links (see the module docs; cheap to clone).
#[derive(Clone)]
pub struct Links {
    shared: Arc<Shared>,
}

impl Links {
    pub fn new(settings: LinkSettings, metrics: ActorMetrics, log: Logger) -> Links {
        Links {
            shared: Arc::new(Shared {
                settings,
                links: Mutex::new(BTreeMap::new()),
                metrics,
                log,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Address, Link>> {
        self.shared.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the body of `nonce` to `host`, carrying the diffs above `after`; `None` without
    /// pacing. Called in nonce order (the escrow composes nonces in order).
    pub fn register(&self, host: &Address, nonce: u64, after: u64) -> Option<Arc<LinkTicket>> {
        let s = &self.shared.settings;
        if !s.enabled {
            return None;
        }
        let now = Instant::now();
        let mut links = self.lock();
        let link = links.entry(host.clone()).or_insert_with(|| Link {
            bodies: VecDeque::new(),
            raised: (s.min, now),
            waiting: 0,
            paced: 0,
            expired: 0,
            overtaken: 0,
        });
        let body = Body {
            nonce,
            sent: None,
            wake: Arc::new(Notify::new()),
        };
        match link.bodies.back() {
            Some(last) if last.nonce >= nonce => {
                let at = link.bodies.partition_point(|b| b.nonce < nonce);
                link.bodies.insert(at, body);
            }
            _ => link.bodies.push_back(body),
        }
        Some(Arc::new(LinkTicket {
            links: self.clone(),
            host: host.clone(),
            nonce,
            after,
            left: AtomicBool::new(false),
            queued: AtomicBool::new(false),
        }))
    }

    /// Every link's state (the escrow's snapshot).
    pub fn view(&self) -> Vec<LinkView> {
        let now = Instant::now();
        let settings = self.shared.settings;
        self.lock()
            .iter()
            .map(|(host, l)| LinkView {
                host: host.to_string(),
                reorder_horizon_ms: l.horizon(&settings, now).as_secs_f64() * 1e3,
                unsent: l.bodies.iter().filter(|b| b.sent.is_none()).count(),
                waiting: l.waiting,
                paced: l.paced,
                expired: l.expired,
                overtaken: l.overtaken,
            })
            .collect()
    }
}

/// One registered body: wait for its turn ([`LinkTicket::ready`]); dropped before it left, it
/// leaves the link (who waited for it goes on).
pub struct LinkTicket {
    links: Links,
    host: Address,
    nonce: u64,
    after: u64,
    /// It left (or gave up on) the link.
    left: AtomicBool,
    /// It is counted among the link's waiters.
    queued: AtomicBool,
}

/// What an unready body waits for.
enum Wait {
    /// The body it depends on leaves (or is dropped).
    Body(tokio::sync::futures::OwnedNotified),
    /// Time alone.
    Time(Instant),
}

impl std::fmt::Debug for LinkTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTicket")
            .field("host", &self.host.short())
            .field("nonce", &self.nonce)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

/// How a body got its turn (`result` label of `devshard_link_wait_seconds`).
fn wait_result(waited: bool, expired: bool) -> &'static str {
    match (waited, expired) {
        (_, true) => "expired",
        (true, false) => "paced",
        (false, false) => "go",
    }
}

impl LinkTicket {
    /// Waits until the body may leave (see the module docs), and marks it sent.
    pub async fn ready(&self) {
        let settings = self.links.shared.settings;
        let started = Instant::now();
        let deadline = started + settings.max_wait;
        let keep = KEEP_SENT.max(settings.max);
        loop {
            let now = Instant::now();
            let waited = self.queued.load(Ordering::Relaxed);
            let wait = {
                let mut links = self.links.lock();
                let Some(link) = links.get_mut(&self.host) else {
                    break;
                };
                let horizon = link.horizon(&settings, now);
                let bodies = link.bodies.iter().map(|b| (b.nonce, b.sent));
                let gate = gate(bodies, self.nonce, self.after, horizon, now);
                let expired = now >= deadline;
                if gate == Gate::Go || expired {
                    link.sent(self.nonce, keep, now);
                    self.left.store(true, Ordering::Relaxed);
                    link.waiting = link.waiting.saturating_sub(usize::from(waited));
                    link.paced += u64::from(waited && !expired);
                    link.expired += u64::from(expired);
                    drop(links);
                    self.report(waited, expired, started.elapsed());
                    return;
                }
                if !waited {
                    link.waiting += 1;
                    self.queued.store(true, Ordering::Relaxed);
                }
                match gate {
                    Gate::Behind(n) => match link.position(n).and_then(|i| link.bodies.get(i)) {
                        Some(b) => Wait::Body(Arc::clone(&b.wake).notified_owned()),
                        None => Wait::Time(now + MIN_RAISE),
                    },
                    Gate::Until(due) => Wait::Time(due),
                    Gate::Go => Wait::Time(now),
                }
            };
            match wait {
                Wait::Body(w) => {
                    let _ = tokio::time::timeout_at(deadline, w).await;
                }
                Wait::Time(t) => tokio::time::sleep_until(t.min(deadline)).await,
            }
        }
        self.left.store(true, Ordering::Relaxed);
    }

    fn report(&self, waited: bool, expired: bool, took: Duration) {
        let shared = &self.links.shared;
        let result = wait_result(waited, expired);
        shared
            .metrics
            .link_wait_seconds
            .with_label_values(&[result])
            .observe(took.as_secs_f64());
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        if expired {
            info!(shared.log, "body left without its turn on the link"; "stage" => "link_wait_expired",
                "nonce" => self.nonce, "host" => self.host.short(), "waited_ms" => ms);
        } else if waited {
            debug!(shared.log, "body waited for its turn on the link"; "stage" => "link_paced",
                "nonce" => self.nonce, "host" => self.host.short(), "waited_ms" => ms);
        }
    }

    /// The host answered this body with a nonce gap, holding only up to `holds`: if the body
    /// that carried what it lacks left before this one, this one overtook it by that much, and
    /// the link's horizon rises to cover it.
    pub fn overtaken(&self, holds: u64) {
        if holds == 0 {
            // A lost session, not overtaking.
            return;
        }
        let shared = &self.links.shared;
        let now = Instant::now();
        let mut links = self.links.lock();
        let Some(link) = links.get_mut(&self.host) else {
            return;
        };
        let sent = |n: u64| link.position(n).and_then(|i| link.bodies.get(i)?.sent);
        let carried = link
            .bodies
            .iter()
            .find(|b| b.nonce > holds && b.nonce < self.nonce)
            .and_then(|b| b.sent);
        let (Some(before), Some(ours)) = (carried, sent(self.nonce)) else {
            return;
        };
        let by = ours.saturating_duration_since(before);
        let settings = shared.settings;
        let horizon = link.horizon(&settings, now);
        link.overtaken += 1;
        // Evidence against the current horizon only when the body left under it.
        if ours >= link.raised.1 {
            let raised = horizon
                .mul_f64(RAISE)
                .max(by.mul_f64(MARGIN))
                .max(MIN_RAISE)
                .min(settings.max);
            link.raised = (raised.max(horizon), now);
        }
        let to = link.horizon(&settings, now);
        drop(links);
        shared.metrics.link_overtaken.inc();
        info!(shared.log, "a body overtook one it depended on"; "stage" => "link_overtaken",
            "nonce" => self.nonce, "host" => self.host.short(), "holds" => holds,
            "overtook_by_ms" => by.as_secs_f64() * 1e3, "horizon_ms" => to.as_secs_f64() * 1e3);
    }
}

impl Drop for LinkTicket {
    fn drop(&mut self) {
        if self.left.load(Ordering::Relaxed) {
            return;
        }
        let mut links = self.links.lock();
        if let Some(link) = links.get_mut(&self.host) {
            if self.queued.load(Ordering::Relaxed) {
                link.waiting = link.waiting.saturating_sub(1);
            }
            if let Some(i) = link.position(self.nonce) {
                if let Some(b) = link.bodies.remove(i) {
                    b.wake.notify_waiters();
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "links_tests.rs"]
mod tests;
