//! Shared helpers: a started poller with a private metrics registry and a recorder of every
//! `ChainChanged` it pushes.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use devshard_actors::{
    chain::{
        ChainChange, ChainChanged, ChainMetrics, ChainPollSettings, ChainPoller, ChainPollerDeps,
        ChainView, GetSnapshot, HostGates, Subscribe,
    },
    clock::{SharedClock, TokioClock},
};
use prometheus::Registry;

/// Unix time the paused tests start at.
pub const T0_MS: i64 = 1_700_000_000_000;

/// A JSON test logger that discards output unless `TEST_LOG=1`.
pub fn logger() -> slog::Logger {
    use slog::Drain;
    if std::env::var("TEST_LOG").is_ok() {
        let drain = slog_json::Json::default(std::io::stderr()).fuse();
        let drain = std::sync::Mutex::new(drain).fuse();
        slog::Logger::root(drain, slog::o!())
    } else {
        slog::Logger::root(slog::Discard, slog::o!())
    }
}

/// Every change pushed to a subscriber, with the time it arrived.
pub type Changes = Arc<Mutex<Vec<(i64, ChainChange)>>>;

/// Records what a poller pushes (stands in for an escrow or the HTTP edge).
pub struct Recorder {
    pub clock: SharedClock,
    pub changes: Changes,
    pub latest: Arc<Mutex<Option<Arc<ChainView>>>>,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<ChainChanged> for Recorder {
    type Result = ();

    fn handle(&mut self, msg: ChainChanged, _: &mut Context<Self>) {
        let now = self.clock.now_ms();
        let mut c = self.changes.lock().unwrap();
        c.extend(msg.changes.into_iter().map(|ch| (now, ch)));
        *self.latest.lock().unwrap() = Some(msg.view);
    }
}

/// A running poller and what it reported.
pub struct Polling {
    pub poller: Addr<ChainPoller>,
    pub registry: Registry,
    pub clock: SharedClock,
    pub changes: Changes,
    pub latest: Arc<Mutex<Option<Arc<ChainView>>>>,
}

impl Polling {
    /// Starts a poller of `api` with `settings`, jitter seeded with 7.
    pub fn start(api: &str, settings: ChainPollSettings, clock: SharedClock) -> Polling {
        let gates = HostGates::new(&settings);
        Polling::start_with_gates(api, settings, clock, gates)
    }

    /// Same, sharing `gates` (the budget and back-off) with other pollers.
    pub fn start_with_gates(
        api: &str,
        settings: ChainPollSettings,
        clock: SharedClock,
        gates: HostGates,
    ) -> Polling {
        let registry = Registry::new();
        let deps = ChainPollerDeps {
            clock: clock.clone(),
            log: logger(),
            metrics: ChainMetrics::register(&registry).unwrap(),
            gates,
            actors: devshard_actors::stats::ActorRegistry::default(),
        };
        let poller = ChainPoller::new(api, settings, deps)
            .unwrap()
            .with_seed(7)
            .start();
        let changes = Changes::default();
        let latest = Arc::new(Mutex::new(None));
        let rec = Recorder {
            clock: clock.clone(),
            changes: changes.clone(),
            latest: latest.clone(),
        }
        .start();
        poller.do_send(Subscribe(rec.recipient()));
        Polling {
            poller,
            registry,
            clock,
            changes,
            latest,
        }
    }

    pub async fn view(&self) -> Arc<ChainView> {
        self.poller.send(GetSnapshot).await.unwrap()
    }

    pub fn changes(&self) -> Vec<(i64, ChainChange)> {
        self.changes.lock().unwrap().clone()
    }

    /// Value of the first metric sample with these labels (0 when absent).
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).first().copied().unwrap_or(0.0)
    }

    /// Sum of every sample with these labels.
    pub fn metric_sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples(name, labels).iter().sum()
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let mut out = Vec::new();
        for family in self.registry.gather() {
            if family.name() != name {
                continue;
            }
            for m in family.get_metric() {
                let matches = labels.iter().all(|(k, v)| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == *k && l.value() == *v)
                });
                if matches {
                    out.push(
                        if family.get_field_type() == prometheus::proto::MetricType::COUNTER {
                            m.get_counter().get_value()
                        } else {
                            m.get_gauge().get_value()
                        },
                    );
                }
            }
        }
        out
    }
}

/// A clock that follows tokio's (paused) time from [`T0_MS`].
pub fn paused_clock() -> SharedClock {
    TokioClock::anchored_at(T0_MS).shared()
}

/// Gaps between successive times.
pub fn gaps(times: &[i64]) -> Vec<i64> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}
