//! The limit update of the adaptive concurrency limiter: a pure function, after Netflix's
//! concurrency-limits `Gradient2Limit`.
//!
//! Each closed window gives one *short* RTT (the mean time from admission to dispatch, the first
//! attempt sent to a host, of the races admitted in it: the gateway's own share). A *long* RTT follows it as an exponential average over `long_window` windows, and falls
//! fast (5 % a window) while it is more than twice the short one, so a drop in latency is learnt
//! quickly. Then:
//!
//! ```text
//! gradient  = clamp(tolerance · long / short, 0.5, 1.0)
//! target    = limit · gradient + √limit          (√limit: the queue allowed to build)
//! new limit = limit · (1 − smoothing) + target · smoothing, within [min, max]
//! ```
//!
//! While latency stays within `tolerance` of its long-term level the gradient is 1 and the limit
//! grows by `smoothing · √limit` a window; when latency rises above it the gradient falls below
//! 1 and the limit shrinks (at most by half of `smoothing` a window). A window in which fewer
//! than half of the limit were in use never grows the limit (the load, not the gateway, limited
//! it: growing then would only remove the protection), but latency above tolerance still
//! shrinks it: the gateway slowed down with fewer races than the limit allows, so the limit is
//! brought down to where it binds.

/// The limiter's learnt state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradientState {
    /// The current limit (fractional; the limiter admits `floor(limit)`).
    pub limit: f64,
    /// Long-term RTT in milliseconds; `None` before the first window.
    pub long_rtt_ms: Option<f64>,
}

/// One closed window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowSample {
    /// Mean RTT of the window's samples, in milliseconds.
    pub rtt_ms: f64,
    /// Most races starting at once during the window.
    pub max_in_flight: usize,
}

/// The knobs the update reads (see `OverloadSettings`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradientParams {
    pub min_limit: f64,
    pub max_limit: f64,
    pub tolerance: f64,
    pub smoothing: f64,
    pub long_window: f64,
}

/// Smallest RTT the update divides by (a zero-latency window is treated as this).
const MIN_RTT_MS: f64 = 0.001;

/// The state after one window (see the module docs).
pub fn next_limit(state: GradientState, w: WindowSample, p: &GradientParams) -> GradientState {
    let short = w.rtt_ms.max(MIN_RTT_MS);
    let mut long = match state.long_rtt_ms {
        None => short,
        Some(long) => long + (short - long) / p.long_window.max(1.0),
    };
    if long / short > 2.0 {
        long *= 0.95;
    }
    let long_rtt_ms = Some(long);
    let gradient = (p.tolerance * long / short).clamp(0.5, 1.0);
    let target = state.limit * gradient + state.limit.sqrt();
    let mut limit = state.limit * (1.0 - p.smoothing) + target * p.smoothing;
    let in_use = w.max_in_flight as f64;
    if in_use < state.limit / 2.0 && (gradient >= 1.0 || limit > state.limit) {
        limit = state.limit;
    }
    GradientState {
        limit: limit.clamp(p.min_limit, p.max_limit),
        long_rtt_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: GradientParams = GradientParams {
        min_limit: 8.0,
        max_limit: 512.0,
        tolerance: 1.5,
        smoothing: 0.2,
        long_window: 100.0,
    };

    fn run(mut s: GradientState, rtt_ms: f64, windows: usize) -> GradientState {
        for _ in 0..windows {
            let busy = s.limit as usize;
            s = next_limit(
                s,
                WindowSample {
                    rtt_ms,
                    max_in_flight: busy,
                },
                &P,
            );
        }
        s
    }

    fn start(limit: f64) -> GradientState {
        GradientState {
            limit,
            long_rtt_ms: None,
        }
    }

    #[test]
    fn steady_latency_grows_the_limit_up_to_the_ceiling() {
        let s = run(start(32.0), 10.0, 1);
        assert!(s.limit > 32.0, "{s:?}");
        assert_eq!(s.long_rtt_ms, Some(10.0));
        let s = run(s, 10.0, 2_000);
        assert_eq!(s.limit, P.max_limit);
    }

    #[test]
    fn a_latency_step_up_shrinks_the_limit_then_it_recovers_once_learnt() {
        let s = run(start(64.0), 10.0, 50);
        let before = s.limit;
        let stepped = run(s, 80.0, 10);
        assert!(stepped.limit < before, "{before} → {}", stepped.limit);
        // At most half of `smoothing` is lost per window (gradient ≥ 0.5).
        let one = run(s, 80.0, 1);
        assert!(one.limit >= before * (1.0 - P.smoothing / 2.0), "{one:?}");
        // Once the long RTT has learnt the new level, the limit grows again.
        let learnt = run(stepped, 80.0, 1_000);
        assert!(learnt.limit > stepped.limit, "{learnt:?}");
    }

    #[test]
    fn a_latency_drop_is_learnt_fast() {
        let s = run(start(64.0), 100.0, 20);
        let dropped = run(s, 10.0, 60);
        // 5 % a window while long > 2 × short: from 100 ms to under 20 ms in 60 windows.
        assert!(dropped.long_rtt_ms.unwrap() < 20.0, "{dropped:?}");
        assert!(dropped.limit > s.limit);
    }

    #[test]
    fn a_window_far_below_the_limit_never_grows_it_but_slow_ones_shrink_it_and_the_floor_holds() {
        let s = run(start(64.0), 10.0, 5);
        let idle = |rtt_ms| {
            next_limit(
                s,
                WindowSample {
                    rtt_ms,
                    max_in_flight: 3,
                },
                &P,
            )
        };
        let steady = idle(10.0);
        assert_eq!(steady.limit, s.limit, "no growth while the load limits");
        let slow = idle(500.0);
        assert!(slow.limit < s.limit, "{slow:?}");
        assert_ne!(slow.long_rtt_ms, s.long_rtt_ms, "latency is still learnt");
        let floor = run(start(9.0), 10.0, 1);
        let floor = run(floor, 1_000.0, 20);
        assert_eq!(floor.limit, P.min_limit);
        // A zero RTT never divides by zero.
        let zero = run(start(16.0), 0.0, 3);
        assert!(zero.limit.is_finite() && zero.limit > 16.0);
    }
}
