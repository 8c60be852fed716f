//! The live page's time series: a bounded ring buffer of the last 15 minutes, one point every
//! [`SAMPLE_INTERVAL`] ([`CAPACITY`] points), served by `GET /v1/debug/series` (admin, `http::debug`).
//!
//! `SeriesSampler` (actor) owns nothing but its handles; the buffer is [`Series`] (shared with the
//! HTTP edge, lost on restart). Its one timer, every [`SAMPLE_INTERVAL`], reads the process
//! registry (no actor is messaged for these) and each escrow's snapshot (1 s deadline), and
//! pushes one point:
//!
//! | field | from |
//! |---|---|
//! | `requests_per_s` | `http_requests_total{path="/v1/chat/completions"}`, delta / interval |
//! | `errors{class}` | the same counter, answers ≥ 400 by class: `4xx`, `429`, `5xx` (delta) |
//! | `ttfb_p50_ms`, `ttfb_p99_ms` | requests ended in the interval: the winner's first content from the race start ([`Series::observe`], fed by the request table's end hook) |
//! | `hedges` | `hedges_total` (delta) |
//! | `sheds` | `gateway_limit_rejections_total` (delta): requests shed by the limits; 0 until overload control sheds more |
//! | `participants{state}` | the `participants{state}` gauge |
//! | `escrows{id}` | `{nonce, nonces_left, balance}` of each live escrow's snapshot |

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use actix::prelude::*;
use devshard_actors::{
    clock::SharedClock, directory::Directory, directory::GetEscrow, escrow::messages::GetSnapshot,
    stats::TrackedAddr, store::SharedStore,
};
use prometheus::{proto::MetricFamily, Registry};
use serde::Serialize;

use crate::{
    escrows,
    state::{accounting::Record, SNAPSHOT_TIMEOUT},
};

/// One point per interval.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// 15 minutes of points.
pub const CAPACITY: usize = 450;
/// TTFB samples kept per interval (enough for exact p99 at the gateway's measured rates).
const MAX_TTFB_SAMPLES: usize = 8_192;
const CHAT_PATH: &str = "/v1/chat/completions";

/// One escrow at one point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EscrowPoint {
    pub nonce: u64,
    pub nonces_left: u64,
    pub balance: u64,
}

/// One point of the series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Unix ms.
    pub t: i64,
    pub requests_per_s: f64,
    pub ttfb_p50_ms: Option<i64>,
    pub ttfb_p99_ms: Option<i64>,
    pub errors: BTreeMap<String, u64>,
    pub hedges: u64,
    pub sheds: u64,
    pub participants: BTreeMap<String, i64>,
    pub escrows: BTreeMap<String, EscrowPoint>,
}

#[derive(Debug, Default)]
struct Inner {
    points: VecDeque<Point>,
    ttfb: Vec<i64>,
    /// Counter totals at the last point (`None` before the first).
    last: Option<Totals>,
}

#[derive(Debug, Clone, Default)]
struct Totals {
    chat: u64,
    errors: BTreeMap<String, u64>,
    hedges: u64,
    sheds: u64,
}

/// The ring buffer (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct Series {
    inner: Arc<Mutex<Inner>>,
}

fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i.min(sorted.len() - 1)).copied()
}

fn family<'a>(families: &'a [MetricFamily], name: &str) -> Option<&'a MetricFamily> {
    families
        .iter()
        .find(|f| f.name().strip_prefix("devshard_").unwrap_or(f.name()) == name)
}

fn counter_sum(families: &[MetricFamily], name: &str) -> u64 {
    family(families, name).map_or(0, |f| {
        f.get_metric()
            .iter()
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    })
}

fn label<'a>(m: &'a prometheus::proto::Metric, name: &str) -> Option<&'a str> {
    m.get_label()
        .iter()
        .find(|l| l.name() == name)
        .map(|l| l.value())
}

fn totals(families: &[MetricFamily]) -> Totals {
    let mut t = Totals {
        hedges: counter_sum(families, "hedges_total"),
        sheds: counter_sum(families, "gateway_limit_rejections_total"),
        ..Totals::default()
    };
    if let Some(f) = family(families, "http_requests_total") {
        for m in f.get_metric() {
            if label(m, "path") != Some(CHAT_PATH) {
                continue;
            }
            let n = m.get_counter().get_value() as u64;
            t.chat += n;
            let status: u16 = label(m, "status").and_then(|s| s.parse().ok()).unwrap_or(0);
            let class = match status {
                429 => "429",
                400..=499 => "4xx",
                500.. => "5xx",
                _ => continue,
            };
            *t.errors.entry(class.to_string()).or_default() += n;
        }
    }
    t
}

fn gauge_by(families: &[MetricFamily], name: &str, key: &str) -> BTreeMap<String, i64> {
    family(families, name).map_or_else(BTreeMap::new, |f| {
        f.get_metric()
            .iter()
            .filter_map(|m| Some((label(m, key)?.to_string(), m.get_gauge().get_value() as i64)))
            .collect()
    })
}

impl Series {
    /// A request ended: its time to first content (winner's send offset + first content).
    pub fn observe(&self, r: &Record) {
        let Some(ttfb) = r.attempts.iter().find_map(|a| {
            Some(a.start_offset_ms? + a.first_content_ms?).filter(|_| a.result.starts_with("won"))
        }) else {
            return;
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.ttfb.len() < MAX_TTFB_SAMPLES {
            inner.ttfb.push(ttfb);
        }
    }

    /// Pushes the point of `now_ms` from the registry and the escrows' figures.
    fn push(&self, now_ms: i64, families: &[MetricFamily], escrows: BTreeMap<String, EscrowPoint>) {
        let now = totals(families);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let prev = inner
            .last
            .replace(now.clone())
            .unwrap_or_else(|| now.clone());
        let mut ttfb = std::mem::take(&mut inner.ttfb);
        ttfb.sort_unstable();
        let errors = now
            .errors
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.saturating_sub(prev.errors.get(k).copied().unwrap_or(0)),
                )
            })
            .collect();
        let point = Point {
            t: now_ms,
            requests_per_s: now.chat.saturating_sub(prev.chat) as f64
                / SAMPLE_INTERVAL.as_secs_f64(),
            ttfb_p50_ms: quantile(&ttfb, 0.5),
            ttfb_p99_ms: quantile(&ttfb, 0.99),
            errors,
            hedges: now.hedges.saturating_sub(prev.hedges),
            sheds: now.sheds.saturating_sub(prev.sheds),
            participants: gauge_by(families, "participants", "state"),
            escrows,
        };
        if inner.points.len() == CAPACITY {
            inner.points.pop_front();
        }
        inner.points.push_back(point);
    }

    /// Every point, oldest first.
    pub fn points(&self) -> Vec<Point> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.points.iter().cloned().collect()
    }
}

/// Samples the series (see the module docs).
pub struct SeriesSampler {
    pub series: Series,
    pub registry: Registry,
    pub directory: TrackedAddr<Directory>,
    pub store: SharedStore,
    pub clock: SharedClock,
}

async fn escrow_points(
    directory: TrackedAddr<Directory>,
    store: SharedStore,
) -> BTreeMap<String, EscrowPoint> {
    let mut out = BTreeMap::new();
    let Ok(statuses) = escrows::statuses(&directory).await else {
        return out;
    };
    for s in statuses {
        let get = GetEscrow {
            escrow_id: s.id.clone(),
        };
        let Ok(Some(addr)) = directory.send(get).timeout(SNAPSHOT_TIMEOUT).await else {
            continue;
        };
        let Ok(snap) = addr.send(GetSnapshot).timeout(SNAPSHOT_TIMEOUT).await else {
            continue;
        };
        let max = escrows::stored_info(&store, &s.id)
            .ok()
            .flatten()
            .map_or(0, |i| i.max_nonce);
        out.insert(
            s.id,
            EscrowPoint {
                nonce: snap.nonce,
                nonces_left: max.saturating_sub(snap.nonce),
                balance: snap.balance,
            },
        );
    }
    out
}

impl Actor for SeriesSampler {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(SAMPLE_INTERVAL, |act, ctx| {
            let fut = escrow_points(act.directory.clone(), act.store.clone());
            ctx.spawn(fut.into_actor(act).map(|escrows, act, _| {
                let families = act.registry.gather();
                act.series.push(act.clock.now_ms(), &families, escrows);
            }));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_fifteen_minutes_and_quantiles_are_exact() {
        let s = Series::default();
        for i in 0..(CAPACITY + 50) {
            s.push(i as i64, &[], BTreeMap::new());
        }
        let points = s.points();
        assert_eq!(points.len(), CAPACITY);
        assert_eq!(points[0].t, 50, "the oldest points went first");
        let sorted: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&sorted, 0.5), Some(51));
        assert_eq!(quantile(&sorted, 0.99), Some(99));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
