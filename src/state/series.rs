//! The live page's time series: a bounded ring buffer of the last 15 minutes, one point every
//! [`SAMPLE_INTERVAL`] ([`CAPACITY`] points), served by `GET /v1/debug/series` (admin, `http::debug`).
//!
//! `SeriesSampler` (actor) owns nothing but its handles; the buffer is [`Series`] (shared with the
//! HTTP edge, lost on restart). Its one timer, every [`SAMPLE_INTERVAL`], reads the process
//! registry and the directory's escrow board (no actor is messaged: the board shares each
//! escrow's balance and nonce), and pushes one point:
//!
//! | field | from |
//! |---|---|
//! | `requests_per_s` | `http_requests_total{path="/v1/chat/completions"}`, delta / interval |
//! | `errors{class}` | the same counter, answers ≥ 400 by class: `4xx`, `429`, `5xx` (delta) |
//! | `ttfb_p50_ms`, `ttfb_p99_ms` | requests ended in the interval: the winner's first content from the race start ([`Series::observe`], fed by the request table's end hook) |
//! | `hedges` | `hedges_total` (delta) |
//! | `sheds` | `gateway_limit_rejections_total` (delta): requests shed by the limits; 0 until overload control sheds more |
//! | `participants{state}` | the `participants{state}` gauge |
//! | `escrows{id}` | `{nonce, nonces_left, balance}` of at most [`ESCROWS_PER_POINT`] live escrows: those with the fewest nonces left (ties: the lower balance, then the id) |
//! | `escrows_live` | how many live escrows there were (the chart shows `escrows` of them) |
//!
//! Memory: a point is bounded whatever the number of escrows. It used to hold every escrow
//! (≈ 225 B each: 1 000 escrows × 450 points ≈ 100 MB after 15 minutes, issue 16).

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use actix::prelude::*;
use devshard_actors::{
    clock::SharedClock,
    directory::{Board, EscrowBoard},
};
use prometheus::{proto::MetricFamily, Registry};
use serde::Serialize;

use crate::state::accounting::Record;

/// One point per interval.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// 15 minutes of points.
pub const CAPACITY: usize = 450;
/// TTFB samples kept per interval (enough for exact p99 at the gateway's measured rates).
const MAX_TTFB_SAMPLES: usize = 8_192;
const CHAT_PATH: &str = "/v1/chat/completions";
/// Escrows kept per point (the chart's lines): a point's size does not grow with the escrows.
pub const ESCROWS_PER_POINT: usize = 16;

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
    /// Live escrows at this point (`escrows` holds at most [`ESCROWS_PER_POINT`] of them).
    pub escrows_live: usize,
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
    fn push(&self, now_ms: i64, families: &[MetricFamily], escrows: EscrowPoints) {
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
            escrows: escrows.shown,
            escrows_live: escrows.live,
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
    /// The directory's published escrows (read without a message).
    pub board: EscrowBoard,
    pub clock: SharedClock,
}

/// The escrows of one point: the ones shown and how many were live.
#[derive(Debug, Default)]
struct EscrowPoints {
    shown: BTreeMap<String, EscrowPoint>,
    live: usize,
}

/// The live escrows of `board` (running actor), as [`shown`] keeps them.
fn escrow_points(board: &Board) -> EscrowPoints {
    let live = board
        .escrows
        .iter()
        .filter(|e| e.addr.is_some())
        .map(|e| {
            let view = e.budget.view();
            let point = EscrowPoint {
                nonce: view.nonce,
                nonces_left: e.info.max_nonce.saturating_sub(view.nonce),
                balance: view.balance,
            };
            (e.id.as_str(), point)
        })
        .collect();
    shown(live)
}

/// At most [`ESCROWS_PER_POINT`] of `live`: the fewest nonces left first, then the lower
/// balance, then the id.
fn shown(mut live: Vec<(&str, EscrowPoint)>) -> EscrowPoints {
    let count = live.len();
    if live.len() > ESCROWS_PER_POINT {
        live.select_nth_unstable_by_key(ESCROWS_PER_POINT - 1, |(id, p)| {
            (p.nonces_left, p.balance, *id)
        });
        live.truncate(ESCROWS_PER_POINT);
    }
    EscrowPoints {
        shown: live
            .into_iter()
            .map(|(id, p)| (id.to_string(), p))
            .collect(),
        live: count,
    }
}

impl Actor for SeriesSampler {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(SAMPLE_INTERVAL, |act, _| {
            let escrows = escrow_points(&act.board.load());
            let families = act.registry.gather();
            act.series.push(act.clock.now_ms(), &families, escrows);
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
            s.push(i as i64, &[], EscrowPoints::default());
        }
        let points = s.points();
        assert_eq!(points.len(), CAPACITY);
        assert_eq!(points[0].t, 50, "the oldest points went first");
        let sorted: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&sorted, 0.5), Some(51));
        assert_eq!(quantile(&sorted, 0.99), Some(99));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn a_point_keeps_the_escrows_with_the_fewest_nonces_left_whatever_their_number() {
        let ids: Vec<String> = (0..1_000).map(|i| format!("e{i:04}")).collect();
        let live = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let point = EscrowPoint {
                    nonce: i as u64,
                    // Escrow i has 1 000 − i left (990.. tie at 10): 984..1000 have the fewest.
                    nonces_left: (1_000 - i.min(990)) as u64,
                    balance: (2_000 - i) as u64,
                };
                (id.as_str(), point)
            })
            .collect();
        let p = shown(live);
        assert_eq!(p.live, 1_000);
        assert_eq!(p.shown.len(), ESCROWS_PER_POINT);
        let kept: Vec<&str> = p.shown.keys().map(String::as_str).collect();
        let want: Vec<String> = (984..1_000).map(|i| format!("e{i:04}")).collect();
        assert_eq!(kept, want, "the 16 closest to their last nonce");
        let s = Series::default();
        for t in 0..(CAPACITY as i64 + 10) {
            let escrows = ids
                .iter()
                .map(|id| {
                    (
                        id.as_str(),
                        EscrowPoint {
                            nonce: 1,
                            nonces_left: 9,
                            balance: 5,
                        },
                    )
                })
                .collect();
            s.push(t, &[], shown(escrows));
        }
        let points = s.points();
        assert!(points.iter().all(|p| p.escrows.len() == ESCROWS_PER_POINT));
        assert!(points.iter().all(|p| p.escrows_live == 1_000));
    }

    #[test]
    fn a_few_escrows_are_all_shown() {
        let live = vec![(
            "42",
            EscrowPoint {
                nonce: 3,
                nonces_left: 7,
                balance: 9,
            },
        )];
        let p = shown(live);
        assert_eq!((p.live, p.shown.len()), (1, 1));
        assert_eq!(p.shown["42"].nonces_left, 7);
    }
}
