//! Overload control at the edge: an adaptive limit on the races *starting* (from admission to
//! their first byte, or to their dispatch with `release_at_dispatch`), with a short bounded queue
//! in front of it.
//!
//! - **What it measures is the gateway's own work.** A race is *dispatched* when its first
//!   attempt goes to a host: the escrow was picked, the nonce granted, the diff composed, signed
//!   and durable. The time from admission to dispatch is the latency sample: it is what the
//!   gateway controls, and what grows when the gateway itself is overloaded (a busy escrow
//!   mailbox, a slow fsync, no CPU left). The host's own latency (300 ms RTT, a 1 s receipt on a
//!   remote host) comes after it and is never a sample, so slow hosts do not shrink the limit.
//!   The slot is held until the first byte (or the failure) by default. With
//!   `release_at_dispatch` (opt-in, with `[escrow] link_pacing`) it is freed at dispatch, and
//!   what bounds the bodies in flight to one host is that host's link
//!   (`devshard_actors::escrow::links`). That serves 2 000 streams on 1.3 s hosts in paused
//!   time, but on a saturated machine overtaking outgrew the links' horizon (README, "Overload,
//!   bounded bodies and stragglers"), so it is not the default.
//! - The limit follows that latency ([`gradient::next_limit`], Gradient2-style): every window
//!   (`window_ms` and at least `window_samples` samples) updates the limit. It stays within
//!   `[min_limit, max_concurrent_races]`; `max_concurrent_races` stays the hard ceiling on every
//!   race in flight, streams included (checked before this limiter, as before).
//! - A request that finds the limit reached waits in a FIFO queue (of the depth below), for at
//!   most `queue_timeout_ms`; past either it is shed ([`Shed`]: 503 + `Retry-After`, the message
//!   says the gateway is saturated). Queue wait is not part of the latency sample, so queueing
//!   never feeds back into the limit.
//! - The queue's depth is `queue_depth`; with `release_at_dispatch`, more while the measured
//!   pace drains more within the deadline ([`effective_depth`]).
//! - The sample is taken by the race's hook ([`StartPermit::on_dispatch`]); the slot is freed
//!   when the permit is dropped (first byte, whole answer or failure), or at dispatch with
//!   `release_at_dispatch` ([`StartPermit::into_dispatch_hook`]); the next waiter gets it at
//!   once. A waiter whose client left is removed from the queue.
//!
//! Visible as `devshard_gateway_concurrency_limit`, `devshard_gateway_starting_races`,
//! `devshard_gateway_queued_requests`, `devshard_gateway_queue_wait_seconds`,
//! `devshard_gateway_limit_rejections_total{reason=queue_full|queue_timeout}`, the `limiter`
//! entry of `/v1/debug/actors` ([`Limiter::view`]) and the debug UI. Log stages
//! `concurrency_limit_changed` (debug, each window that moved the whole limit) and
//! `request_shed` (in the chat handler). Nothing survives a restart: the limit starts again at
//! `initial_limit`. No timer: windows close as samples arrive.

pub mod gradient;
pub mod settings;
mod shed;

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use devshard_actors::race::DispatchHook;
use slog::Logger;
use tokio::{sync::oneshot, time::Instant};

pub use self::shed::{effective_depth, LimiterView, Shed, ShedReason, DEPTH_CAP_FACTOR};
use self::{
    gradient::{GradientParams, GradientState, WindowSample},
    settings::OverloadSettings,
};
use crate::metrics::HttpMetrics;

/// The open window's samples.
#[derive(Debug)]
struct Window {
    opened: Instant,
    samples: u32,
    rtt_sum_ms: f64,
    max_in_flight: usize,
}

impl Window {
    fn new(starting: usize) -> Window {
        Window {
            opened: Instant::now(),
            samples: 0,
            rtt_sum_ms: 0.0,
            max_in_flight: starting,
        }
    }
}

#[derive(Debug)]
struct State {
    gradient: GradientState,
    starting: usize,
    queue: VecDeque<(u64, oneshot::Sender<()>)>,
    next_id: u64,
    window: Window,
    last_window_rtt_ms: Option<f64>,
    admitted: u64,
    shed: [u64; 2],
}

impl State {
    fn limit(&self) -> usize {
        self.gradient.limit.floor().max(1.0) as usize
    }
}

struct Shared {
    settings: OverloadSettings,
    params: GradientParams,
    state: Mutex<State>,
    metrics: HttpMetrics,
    log: Logger,
}

/// See the module docs (cheap to clone).
#[derive(Clone)]
pub struct Limiter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("view", &self.view())
            .finish()
    }
}

/// A starting slot: released when dropped; [`StartPermit::on_dispatch`] reports the latency.
pub struct StartPermit {
    shared: Option<Arc<Shared>>,
    admitted: Instant,
}

impl std::fmt::Debug for StartPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartPermit")
            .field("admitted", &self.admitted)
            .finish_non_exhaustive()
    }
}

impl StartPermit {
    /// The race's first attempt went to a host: its time since admission (the gateway's own
    /// share) is a sample, and the slot is free.
    pub fn dispatched(self) {
        if let Some(shared) = &self.shared {
            sample(shared, self.admitted.elapsed());
        }
    }

    /// The race's hook (`RaceSpec::dispatched`): when the first attempt goes to a host, the
    /// time since admission (the gateway's own share) is a sample and the slot is free. The
    /// race waiting on its host holds no slot: each host's link paces its bodies instead
    /// (`devshard_actors::escrow::links`). Dropped uncalled (no attempt was dispatched), the
    /// slot is freed all the same.
    pub fn into_dispatch_hook(self) -> DispatchHook {
        Box::new(move || self.dispatched())
    }

    /// The race's hook when the slot is held to the first byte (`release_at_dispatch = false`,
    /// the default): at dispatch the time since admission is a sample; the slot is freed when
    /// the permit is dropped (first byte, whole answer or failure).
    pub fn on_dispatch(&self) -> DispatchHook {
        let (shared, admitted) = (self.shared.clone(), self.admitted);
        Box::new(move || {
            if let Some(shared) = shared {
                sample(&shared, admitted.elapsed());
            }
        })
    }
}

impl Drop for StartPermit {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            release(&shared);
        }
    }
}

/// A request in the queue. Dropped before it settled (the client went away), it leaves the
/// queue, and gives back a slot handed to it meanwhile.
struct Waiting<'a> {
    shared: &'a Arc<Shared>,
    id: u64,
    rx: Option<oneshot::Receiver<()>>,
}

impl Waiting<'_> {
    /// Whether the slot is ours: handed over (`got`, or just as the deadline passed); else the
    /// waiter leaves the queue.
    fn settle(&mut self, got: bool) -> bool {
        let Some(mut rx) = self.rx.take() else {
            return false;
        };
        if got {
            return true;
        }
        let mut st = lock(self.shared);
        let before = st.queue.len();
        st.queue.retain(|(w, _)| *w != self.id);
        let removed = st.queue.len() < before;
        publish(self.shared, &st);
        // Popped by a release under the lock: the slot was sent before we looked.
        !removed && rx.try_recv().is_ok()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.settle(false) {
            release(self.shared);
        }
    }
}

impl Limiter {
    /// A limiter under the hard ceiling `ceiling` (`max_concurrent_races`).
    pub fn new(
        settings: OverloadSettings,
        ceiling: usize,
        metrics: HttpMetrics,
        log: Logger,
    ) -> Limiter {
        let params = settings.params(ceiling);
        let initial = (settings.initial_limit as f64).clamp(params.min_limit, params.max_limit);
        metrics.concurrency_limit.set(initial as i64);
        Limiter {
            shared: Arc::new(Shared {
                settings,
                params,
                state: Mutex::new(State {
                    gradient: GradientState {
                        limit: initial,
                        long_rtt_ms: None,
                    },
                    starting: 0,
                    queue: VecDeque::new(),
                    next_id: 0,
                    window: Window::new(0),
                    last_window_rtt_ms: None,
                    admitted: 0,
                    shed: [0; 2],
                }),
                metrics,
                log,
            }),
        }
    }

    /// A starting slot, now or after a wait in the queue, or the reason the request is shed.
    pub async fn acquire(&self) -> Result<StartPermit, Shed> {
        let shared = &self.shared;
        if !shared.settings.enabled {
            return Ok(StartPermit {
                shared: None,
                admitted: Instant::now(),
            });
        }
        let (id, rx) = {
            let mut st = lock(shared);
            if st.queue.is_empty() && st.starting < st.limit() {
                admit(shared, &mut st);
                return Ok(self.permit());
            }
            if st.queue.len() >= depth(shared, &st) {
                return Err(shed(shared, &mut st, ShedReason::QueueFull));
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id;
            st.next_id += 1;
            st.queue.push_back((id, tx));
            publish(shared, &st);
            (id, rx)
        };
        let queued = Instant::now();
        let mut waiting = Waiting {
            shared,
            id,
            rx: Some(rx),
        };
        let deadline = Duration::from_millis(shared.settings.queue_timeout_ms);
        let got = match waiting.rx.as_mut() {
            Some(rx) => matches!(tokio::time::timeout(deadline, rx).await, Ok(Ok(()))),
            None => false,
        };
        let ours = waiting.settle(got);
        shared
            .metrics
            .queue_wait
            .observe(queued.elapsed().as_secs_f64());
        if !ours {
            let mut st = lock(shared);
            return Err(shed(shared, &mut st, ShedReason::QueueTimeout));
        }
        Ok(self.permit())
    }

    fn permit(&self) -> StartPermit {
        StartPermit {
            shared: Some(Arc::clone(&self.shared)),
            admitted: Instant::now(),
        }
    }

    /// Whether a race's slot is freed at dispatch (`release_at_dispatch`) rather than at its
    /// first byte.
    pub fn releases_at_dispatch(&self) -> bool {
        self.shared.settings.release_at_dispatch
    }

    /// The limiter's state (`/v1/debug/actors`, the UI).
    pub fn view(&self) -> LimiterView {
        let shared = &self.shared;
        let st = lock(shared);
        LimiterView {
            enabled: shared.settings.enabled,
            limit: st.limit(),
            ceiling: shared.params.max_limit as usize,
            starting: st.starting,
            queued: st.queue.len(),
            queue_depth: depth(shared, &st),
            long_rtt_ms: st.gradient.long_rtt_ms,
            last_window_rtt_ms: st.last_window_rtt_ms,
            admitted: st.admitted,
            shed_queue_full: st.shed[0],
            shed_queue_timeout: st.shed[1],
        }
    }
}

/// The queue's depth now: [`effective_depth`] when slots are freed at dispatch (the latency
/// sample is then a slot's whole hold); `queue_depth` when they are held to the first byte.
fn depth(shared: &Shared, st: &State) -> usize {
    let s = &shared.settings;
    if !s.release_at_dispatch {
        return s.queue_depth;
    }
    effective_depth(
        s.queue_depth,
        st.limit(),
        s.queue_timeout_ms,
        st.last_window_rtt_ms,
    )
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

fn admit(shared: &Shared, st: &mut State) {
    st.starting += 1;
    st.admitted += 1;
    st.window.max_in_flight = st.window.max_in_flight.max(st.starting);
    publish(shared, st);
}

fn shed(shared: &Shared, st: &mut State, reason: ShedReason) -> Shed {
    st.shed[usize::from(reason == ShedReason::QueueTimeout)] += 1;
    shared
        .metrics
        .rejections
        .with_label_values(&[reason.label()])
        .inc();
    publish(shared, st);
    Shed {
        reason,
        retry_after_s: shared.settings.retry_after_s,
        limit: st.limit(),
    }
}

/// One race's gateway share (admission to dispatch): closes the window when due.
fn sample(shared: &Shared, rtt: Duration) {
    let mut st = lock(shared);
    st.window.samples += 1;
    st.window.rtt_sum_ms += rtt.as_secs_f64() * 1e3;
    let w = &st.window;
    let due = w.opened.elapsed() >= Duration::from_millis(shared.settings.window_ms);
    if due && w.samples >= shared.settings.window_samples {
        close_window(shared, &mut st);
    }
}

/// Frees a slot and hands free slots to the queue's head.
fn release(shared: &Shared) {
    let mut st = lock(shared);
    st.starting = st.starting.saturating_sub(1);
    while st.starting < st.limit() {
        let Some((_, tx)) = st.queue.pop_front() else {
            break;
        };
        if tx.send(()).is_ok() {
            admit(shared, &mut st);
        }
    }
    publish(shared, &st);
}

fn close_window(shared: &Shared, st: &mut State) {
    let sample = WindowSample {
        rtt_ms: st.window.rtt_sum_ms / f64::from(st.window.samples.max(1)),
        max_in_flight: st.window.max_in_flight,
    };
    let before = st.limit();
    st.gradient = gradient::next_limit(st.gradient, sample, &shared.params);
    st.last_window_rtt_ms = Some(sample.rtt_ms);
    st.window = Window::new(st.starting);
    if st.limit() != before {
        slog::debug!(shared.log, "concurrency limit changed"; "stage" => "concurrency_limit_changed",
            "from" => before, "to" => st.limit(), "rtt_ms" => sample.rtt_ms,
            "long_rtt_ms" => st.gradient.long_rtt_ms, "in_flight" => sample.max_in_flight);
    }
}

fn publish(shared: &Shared, st: &State) {
    let m = &shared.metrics;
    m.concurrency_limit
        .set(i64::try_from(st.limit()).unwrap_or(i64::MAX));
    m.starting_races
        .set(i64::try_from(st.starting).unwrap_or(i64::MAX));
    m.queued_requests
        .set(i64::try_from(st.queue.len()).unwrap_or(i64::MAX));
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
