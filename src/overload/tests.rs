//! The limiter in paused time: simulated races whose latency steps, the queue's depth and
//! deadline, hand-over and departed waiters.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use super::*;
use crate::{logging, metrics};

fn limiter(settings: OverloadSettings, ceiling: usize) -> (Limiter, HttpMetrics) {
    let registry = metrics::new_registry().unwrap();
    let m = HttpMetrics::register(&registry).unwrap();
    let l = Limiter::new(settings, ceiling, m.clone(), logging::discard());
    (l, m)
}

/// `clients` closed-loop clients whose races take `latency_ms` (read each time) to start; they
/// run until `stop`. Returns (races started, requests shed).
fn clients(
    l: &Limiter,
    n: usize,
    latency_ms: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
    let (ok, shed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    for _ in 0..n {
        let (l, lat, stop) = (l.clone(), latency_ms.clone(), stop.clone());
        let (ok, shed) = (ok.clone(), shed.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match l.acquire().await {
                    Ok(permit) => {
                        let ms = lat.load(Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        permit.dispatched();
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        shed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
    }
    (ok, shed)
}

/// Lowest and highest limit seen over `secs` seconds (sampled every 50 ms).
async fn watch_limit(l: &Limiter, secs: u64) -> (usize, usize) {
    let (mut lo, mut hi) = (usize::MAX, 0);
    for _ in 0..secs * 20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let v = l.view().limit;
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo, hi)
}

/// Lets spawned tasks run until `queued` requests wait.
async fn settle(l: &Limiter, queued: usize) {
    for _ in 0..100 {
        if l.view().queued == queued {
            return;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(l.view().queued, queued);
}

#[tokio::test(start_paused = true)]
async fn the_limit_rises_under_low_latency_and_falls_when_latency_steps_up() {
    let settings = OverloadSettings {
        initial_limit: 16,
        min_limit: 4,
        ..OverloadSettings::default()
    };
    let (l, m) = limiter(settings, 256);
    let latency = Arc::new(AtomicU64::new(10));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, shed) = clients(&l, 400, &latency, &stop);
    let (_, risen) = watch_limit(&l, 30).await;
    assert!(risen > 64, "the limit rose from 16 to {risen} under 10 ms");
    assert_eq!(m.concurrency_limit.get(), l.view().limit as i64);
    let before = l.view().limit;
    latency.store(200, Ordering::Relaxed);
    let (fallen, _) = watch_limit(&l, 10).await;
    assert!(
        fallen * 2 < before,
        "the limit fell from {before} to {fallen} after the step to 200 ms"
    );
    let view = l.view();
    assert!(view.long_rtt_ms.unwrap() > 10.0 && view.last_window_rtt_ms.unwrap() >= 200.0);
    assert!(view.starting <= view.limit.max(before));
    stop.store(true, Ordering::Relaxed);
    assert!(ok.load(Ordering::Relaxed) > 10_000);
    assert_eq!(
        view.shed_queue_full + view.shed_queue_timeout,
        shed.load(Ordering::Relaxed)
    );
}

#[tokio::test(start_paused = true)]
async fn the_queue_sheds_past_its_depth_and_past_its_deadline() {
    let settings = OverloadSettings {
        initial_limit: 2,
        min_limit: 2,
        queue_depth: 2,
        queue_timeout_ms: 50,
        retry_after_s: 3,
        ..OverloadSettings::default()
    };
    let (l, m) = limiter(settings, 2);
    let held = [l.acquire().await.unwrap(), l.acquire().await.unwrap()];
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move { l.acquire().await.map(drop) })
        })
        .collect();
    settle(&l, 2).await;
    assert_eq!(m.queued_requests.get(), 2);
    let full = l.acquire().await.unwrap_err();
    assert_eq!(
        (full.reason, full.retry_after_s),
        (ShedReason::QueueFull, 3)
    );
    tokio::time::sleep(Duration::from_millis(51)).await;
    for w in waiters {
        assert_eq!(
            w.await.unwrap().unwrap_err().reason,
            ShedReason::QueueTimeout
        );
    }
    let v = l.view();
    assert_eq!(
        (
            v.queued,
            v.starting,
            v.shed_queue_full,
            v.shed_queue_timeout
        ),
        (0, 2, 1, 2)
    );
    let shed = |r: &str| m.rejections.with_label_values(&[r]).get();
    assert_eq!((shed("queue_full"), shed("queue_timeout")), (1, 2));
    drop(held);
    assert_eq!(l.view().starting, 0);
    let again = l.acquire().await;
    assert!(again.is_ok(), "a freed slot is taken at once");
}

#[tokio::test(start_paused = true)]
async fn a_freed_slot_goes_to_the_queue_head_and_a_departed_waiter_leaves_the_queue() {
    let settings = OverloadSettings {
        initial_limit: 1,
        min_limit: 1,
        queue_timeout_ms: 10_000,
        ..OverloadSettings::default()
    };
    let (l, _) = limiter(settings, 1);
    let held = l.acquire().await.unwrap();
    let spawn = |l: &Limiter| {
        let l = l.clone();
        tokio::spawn(async move { l.acquire().await.is_ok() })
    };
    let gone = spawn(&l);
    let next = spawn(&l);
    settle(&l, 2).await;
    gone.abort();
    let _ = gone.await;
    assert_eq!(l.view().queued, 1, "the departed waiter left the queue");
    drop(held);
    assert!(next.await.unwrap(), "the head of the queue got the slot");
    assert_eq!((l.view().starting, l.view().queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn disabled_admits_everything() {
    let settings = OverloadSettings {
        enabled: false,
        ..OverloadSettings::default()
    };
    let (l, _) = limiter(settings, 1);
    let permits: Vec<_> = futures::future::join_all((0..100).map(|_| l.acquire())).await;
    assert!(permits.iter().all(Result::is_ok));
    assert_eq!(l.view().starting, 0);
}

#[test]
fn the_queue_depth_follows_what_the_limit_drains_within_the_deadline() {
    // No latency measured yet: the configured depth.
    assert_eq!(effective_depth(1_024, 64, 2_000, None), 1_024);
    // 64 slots, 100 ms each, 2 s deadline: 1 280 can be admitted in time.
    assert_eq!(effective_depth(1_024, 64, 2_000, Some(100.0)), 1_280);
    // Slow: never below the configured depth.
    assert_eq!(effective_depth(1_024, 64, 2_000, Some(1_000.0)), 1_024);
    // Fast: at most DEPTH_CAP_FACTOR times the configured depth.
    assert_eq!(
        effective_depth(1_024, 64, 2_000, Some(0.01)),
        1_024 * DEPTH_CAP_FACTOR
    );
    assert_eq!(effective_depth(1_024, 64, 2_000, Some(0.0)), 1_024);
}

#[tokio::test(start_paused = true)]
async fn a_burst_the_limit_drains_in_time_waits_instead_of_being_shed() {
    let settings = OverloadSettings {
        initial_limit: 2,
        min_limit: 2,
        queue_depth: 4,
        queue_timeout_ms: 200,
        window_ms: 10,
        window_samples: 2,
        release_at_dispatch: true,
        ..OverloadSettings::default()
    };
    let (l, _) = limiter(settings.clone(), 2);
    // A window of 1 ms dispatches: the pace is known.
    for _ in 0..4 {
        let p = l.acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        p.dispatched();
    }
    assert_eq!(l.view().queue_depth, 4 * DEPTH_CAP_FACTOR);
    // 24 at once: 2 start, 22 wait (a depth of 4 would shed 18); each dispatches in 5 ms.
    let burst: Vec<_> = (0..24)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move {
                let p = l.acquire().await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                p.dispatched();
                Ok::<(), Shed>(())
            })
        })
        .collect();
    for b in burst {
        assert!(b.await.unwrap().is_ok(), "{:?}", l.view());
    }
    let v = l.view();
    assert_eq!((v.shed_queue_full, v.shed_queue_timeout), (0, 0));
    // Slots held to the first byte: the dispatch latency says nothing of the drain.
    let held = OverloadSettings {
        release_at_dispatch: false,
        ..settings
    };
    let (l, _) = limiter(held, 2);
    for _ in 0..4 {
        let p = l.acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        p.dispatched();
    }
    assert_eq!(l.view().queue_depth, 4);
}
