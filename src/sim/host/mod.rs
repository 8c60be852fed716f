//! A simulated devshard host: its key, listener, fault script, latency profile, counters and
//! per-escrow sessions, plus the request router.
//!
//! Routes (base URL `http://ip:port`):
//! - `POST {prefix}/sessions/{id}/chat/completions` ([`chat`]), `POST …/verify-timeout`
//!   ([`timeout`]), `GET …/diffs|mempool|signatures` ([`query`]);
//! - `POST /v1/chat/completions`: plain OpenAI endpoint ([`super::openai`]);
//! - `GET /v1/versions`: the miner's ML-node versions.
//!
//! Mutable host state sits behind two `std::sync::Mutex`es, never held across an `.await` nor
//! one inside the other: the fault script, latency and jitter here, the sessions in
//! [`sessions`] (a catch-up holds that one for seconds). Sessions are created lazily from the
//! in-process chain on the first POST.

pub(crate) mod chat;
pub(crate) mod logprobs;
pub(crate) mod query;
pub(crate) mod session;
pub(crate) mod sessions;
pub(crate) mod stream;
pub(crate) mod timeout;

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, OnceLock},
    time::Duration,
};

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use devshard_actors::{clock::SharedClock, protocol::crypto::SigningKey};

use self::sessions::HostSessions;
use super::{
    faults::{AtomicCounters, Faults},
    network::NetCore,
    profile::{Jitter, LatencyProfile},
    server::{self, Listener, Reject, Resp},
};

/// The fault script, latency and jitter of a host.
#[derive(Debug)]
pub(crate) struct HostControl {
    /// Fault sets; the front one is active.
    script: VecDeque<Faults>,
    /// Remaining chat requests of the active set (`None` = until replaced).
    remaining: Option<u32>,
    down_until_ms: i64,
    latency: LatencyProfile,
    jitter: Jitter,
    /// Draws of the straggler knob (its own seeded stream: jitter draws never shift it).
    stragglers: Jitter,
}

/// One simulated host.
#[derive(Debug)]
pub(crate) struct HostState {
    pub(crate) index: usize,
    /// The cold key: the host's identity (its slots' validator address).
    pub(crate) key: SigningKey,
    /// The key it signs protocol messages with instead, if it uses a warm key (`warm.rs`).
    pub(crate) warm_key: Option<SigningKey>,
    /// A key nobody granted (`sign_with_ungranted_key`).
    pub(crate) ungranted_key: SigningKey,
    pub(crate) url: String,
    pub(crate) counters: AtomicCounters,
    clock: SharedClock,
    /// Runtime the simulator was started on (timers spawned from sync control calls).
    rt: tokio::runtime::Handle,
    seed: String,
    listener: OnceLock<Listener>,
    control: Mutex<HostControl>,
    sessions: Mutex<HostSessions>,
}

/// Runs `f` on the blocking pool. Applying diffs verifies every signature: a catch-up of
/// thousands of diffs held the runtime thread that every simulated host, the chain API and (in
/// `chaos`) the runner's load and checks share, so one host catching up stalled all of them for
/// seconds, a fault no network of separate machines has (the rotating hour-long run: the gateway's
/// log silent for a second after a restart while every host's answer waited).
pub(crate) async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Reject> + Send + 'static,
) -> Result<T, Reject> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Reject::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("host task failed: {e}"),
        )
    })?
}

impl HostState {
    pub(crate) fn new(
        index: usize,
        key: SigningKey,
        url: String,
        latency: LatencyProfile,
        clock: SharedClock,
        rt: tokio::runtime::Handle,
        seed: &str,
    ) -> HostState {
        let jitter = Jitter::new(derive_seed(seed, "latency", index, ""));
        HostState {
            index,
            key,
            warm_key: None,
            ungranted_key: super::warm::ungranted_key(seed, index),
            url,
            counters: AtomicCounters::default(),
            clock,
            rt,
            seed: seed.to_owned(),
            listener: OnceLock::new(),
            control: Mutex::new(HostControl {
                script: VecDeque::new(),
                remaining: None,
                down_until_ms: 0,
                latency,
                jitter,
                stragglers: Jitter::new(derive_seed(seed, "stragglers", index, "")),
            }),
            sessions: Mutex::new(HostSessions::default()),
        }
    }

    pub(crate) fn set_listener(&self, listener: Listener) {
        let _ = self.listener.set(listener);
    }

    pub(crate) fn listener(&self) -> Option<&Listener> {
        self.listener.get()
    }

    /// The fault script's lock (poisoning is ignored: no invariant spans a panic).
    fn lock(&self) -> MutexGuard<'_, HostControl> {
        self.control.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The runtime the simulator was started on.
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.rt
    }

    /// The host's clock in unix milliseconds: the network clock plus the active `clock_skew_s`.
    pub(crate) fn now_ms(&self) -> i64 {
        let faults = self.faults();
        self.now_ms_with(&faults)
    }

    /// The host's clock under a given fault set (a chat request uses the set it consumed).
    pub(crate) fn now_ms_with(&self, faults: &Faults) -> i64 {
        let skew_ms = faults.clock_skew_s.unwrap_or(0).saturating_mul(1000);
        self.clock.now_ms().saturating_add(skew_ms)
    }

    pub(crate) fn now_unix(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }

    /// The active fault set (empty when none).
    pub(crate) fn faults(&self) -> Faults {
        self.lock().script.front().cloned().unwrap_or_default()
    }

    /// The whole script (active set first).
    pub(crate) fn script(&self) -> Vec<Faults> {
        self.lock().script.iter().cloned().collect()
    }

    /// Replaces the fault script (empty = no faults) and activates its first set; a set that
    /// restarts the host empty waits for the sessions lock (synchronous callers only).
    pub(crate) fn set_script(self: &Arc<Self>, script: Vec<Faults>) {
        let mut inner = self.lock();
        inner.script = script.into();
        let forget = self.activate(&mut inner);
        drop(inner);
        if forget {
            self.forget_sessions();
        }
    }

    /// [`Self::set_script`] from async code, on the blocking pool: the control API answers once
    /// the script is in place, without holding the runtime thread behind a catch-up.
    pub(crate) async fn replace_script(self: &Arc<Self>, script: Vec<Faults>) {
        let host = Arc::clone(self);
        let _ = tokio::task::spawn_blocking(move || host.set_script(script)).await;
    }

    /// Returns the fault set that applies to this chat request and consumes one use of it.
    pub(crate) fn take_chat_faults(self: &Arc<Self>) -> Faults {
        let mut inner = self.lock();
        let current = inner.script.front().cloned().unwrap_or_default();
        if let Some(n) = inner.remaining {
            let left = n.saturating_sub(1);
            inner.remaining = Some(left);
            if left == 0 {
                inner.script.pop_front();
                if self.activate(&mut inner) {
                    drop(inner);
                    self.forget_sessions_soon();
                }
            }
        }
        current
    }

    /// Runs the one-shot actions of the (new) front set and updates the listener; `true` when
    /// the set restarts the host empty (the caller forgets the sessions, outside this lock).
    #[must_use]
    fn activate(self: &Arc<Self>, inner: &mut HostControl) -> bool {
        // Sets with `times: 0` are spent before they start.
        while inner.script.front().is_some_and(|f| f.times == Some(0)) {
            inner.script.pop_front();
        }
        let front = inner.script.front().cloned().unwrap_or_default();
        inner.remaining = front.times;
        if inner.script.is_empty() {
            // Clearing every fault also ends a down window.
            inner.down_until_ms = 0;
        }
        if let Some(ms) = front.down_for_ms {
            inner.down_until_ms = self.clock.now_ms().saturating_add(ms as i64);
            let host = Arc::clone(self);
            self.rt.spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                host.refresh_listener();
            });
        }
        self.apply_listener_state(inner);
        front.forget_session
    }

    fn refresh_listener(&self) {
        let inner = self.lock();
        self.apply_listener_state(&inner);
    }

    fn apply_listener_state(&self, inner: &HostControl) {
        let refuse = inner.script.front().is_some_and(|f| f.refuse_connections);
        let down = self.clock.now_ms() < inner.down_until_ms;
        if let Some(l) = self.listener.get() {
            l.set_up(!refuse && !down);
        }
    }

    pub(crate) fn latency(&self) -> LatencyProfile {
        self.lock().latency.clone()
    }

    pub(crate) fn set_latency(&self, latency: LatencyProfile) {
        self.lock().latency = latency;
    }

    /// `base` with this host's jitter applied.
    pub(crate) fn jittered(&self, base: Duration) -> Duration {
        let mut inner = self.lock();
        let frac = inner.latency.jitter;
        inner.jitter.apply(base, frac)
    }

    /// The straggler knob, drawn once per request with a first token: `straggler_delay_ms` with
    /// probability `straggler_rate` (from the host's seeded stream, so a run is reproducible),
    /// else zero. Counted in `stragglers`.
    pub(crate) fn straggler_delay(&self) -> Duration {
        let mut inner = self.lock();
        let (rate, ms) = (
            inner.latency.straggler_rate,
            inner.latency.straggler_delay_ms,
        );
        if rate <= 0.0 || ms == 0 || inner.stragglers.unit() >= rate {
            return Duration::ZERO;
        }
        AtomicCounters::bump(&self.counters.stragglers);
        Duration::from_millis(ms)
    }

    /// Sleeps `base` plus jitter (on tokio's clock).
    pub(crate) async fn delay(&self, base: Duration) {
        if base.is_zero() {
            return;
        }
        let d = self.jittered(base);
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
    }

    /// Seed of a session's validation sampler.
    pub(crate) fn session_seed(&self, escrow_id: &str, incarnation: u64) -> [u8; 32] {
        derive_seed(
            &self.seed,
            &format!("validation/{incarnation}"),
            self.index,
            escrow_id,
        )
    }
}

/// A miner's `GET /v1/versions`.
pub(crate) fn versions_response(core: &NetCore, index: usize) -> Resp {
    let nodes: Vec<_> = core
        .chain
        .participants()
        .get(index)
        .map(|p| json!({"node_id": p.node_id, "poc_validation_inference": p.preserved}))
        .into_iter()
        .collect();
    server::json(StatusCode::OK, &json!({ "mlnodes": nodes }))
}

/// `sha256(seed ‖ purpose ‖ index ‖ extra)`.
pub(crate) fn derive_seed(seed: &str, purpose: &str, index: usize, extra: &str) -> [u8; 32] {
    let pre = format!("{seed}\u{0}{purpose}\u{0}{index}\u{0}{extra}");
    devshard_actors::protocol::crypto::sha256(pre.as_bytes())
}

/// Routes one request to a host endpoint.
pub(crate) async fn route(
    core: Arc<NetCore>,
    index: usize,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Resp {
    let Some(host) = core.hosts.get(index).cloned() else {
        return server::message(StatusCode::NOT_FOUND, "Not Found");
    };
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    if path == "/v1/chat/completions" && method == Method::POST {
        return super::openai::handle(&core, &host, req).await;
    }
    if path == "/v1/versions" && method == Method::GET {
        AtomicCounters::bump(&host.counters.versions);
        let client = super::traffic::client_id(&req, peer);
        return core
            .chain
            .serve(&format!("host-{index}"), &path, &client, || {
                versions_response(&core, index)
            });
    }
    let prefix = format!("{}/sessions/", core.cfg.route_prefix.trim_end_matches('/'));
    let Some((escrow_id, action)) = path.strip_prefix(&prefix).and_then(|r| r.split_once('/'))
    else {
        return server::message(StatusCode::NOT_FOUND, "Not Found");
    };
    let escrow_id = escrow_id.to_owned();
    match (action, method) {
        ("chat/completions", Method::POST) => chat::handle(core, host, escrow_id, req).await,
        ("verify-timeout", Method::POST) => timeout::handle(core, host, escrow_id, req).await,
        ("diffs", Method::GET) => query::diffs(&host, &escrow_id, req.uri().query()).await,
        ("mempool", Method::GET) => query::mempool(&host, &escrow_id).await,
        ("signatures", Method::GET) => {
            query::signatures(&host, &escrow_id, req.uri().query()).await
        }
        ("chat/completions" | "verify-timeout" | "diffs" | "mempool" | "signatures", _) => {
            server::message(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        }
        _ => server::message(StatusCode::NOT_FOUND, "Not Found"),
    }
}
