//! Back-off with jitter for the repair loop (docs/health.md §6.4: 2 s first, then 15 s → 30 s →
//! 60 s → 300 s, ±20 %), and the plain doubling the escrow's retries share ([`doubled`]: vote
//! rounds that fell short, background catch-up rounds that moved their host nowhere). The chain
//! poller's 429/503 back-off and `Retry-After` parsing live in `chain::backoff`.
//!
//! Jitter is an explicit draw in `[-1, 1]` ([`jitter_draw`] makes one from any `rand::Rng`), so
//! callers and tests are deterministic.

use std::time::Duration;

use rand::Rng;

use super::settings::HealthSettings;

/// Delay before a repair loop's first tick (no jitter).
pub const REPAIR_FIRST_DELAY_MS: i64 = 2_000;
/// Delays between later repair ticks; the last one repeats.
pub const REPAIR_DELAYS_MS: [i64; 4] = [15_000, 30_000, 60_000, 300_000];
/// ± fraction of jitter on repair delays.
pub const REPAIR_JITTER: f64 = 0.2;

/// `first · 2^doublings`, at most `max` (saturating: never overflows).
pub fn doubled(first: Duration, doublings: u32, max: Duration) -> Duration {
    first.saturating_mul(1u32 << doublings.min(31)).min(max)
}

/// A uniform draw in `[-1, 1]`.
pub fn jitter_draw(rng: &mut impl Rng) -> f64 {
    rng.gen_range(-1.0..=1.0)
}

/// `base_ms × (1 + fraction × draw)`, at least 1 ms (draw clamped to `[-1, 1]`, NaN counts as 0).
pub fn jittered_ms(base_ms: i64, fraction: f64, draw: f64) -> i64 {
    let draw = if draw.is_finite() {
        draw.clamp(-1.0, 1.0)
    } else {
        0.0
    };
    let fraction = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((base_ms.max(0) as f64 * (1.0 + fraction * draw)).round() as i64).max(1)
}

/// Delay before repair tick `attempt` (0 = the first tick, 2 s; then 15 s, 30 s, 60 s, 300 s, …).
pub fn repair_delay_ms(attempt: u32, draw: f64) -> i64 {
    let Some(i) = attempt.checked_sub(1) else {
        return REPAIR_FIRST_DELAY_MS;
    };
    let i = usize::try_from(i).unwrap_or(usize::MAX);
    let base = REPAIR_DELAYS_MS
        .get(i)
        .or(REPAIR_DELAYS_MS.last())
        .copied()
        .unwrap_or(REPAIR_FIRST_DELAY_MS);
    jittered_ms(base, REPAIR_JITTER, draw)
}

/// The repair loop started at `started_ms` has tried for `repair_give_up_ms`: stop.
pub fn repair_gave_up(started_ms: i64, now_ms: i64, settings: &HealthSettings) -> bool {
    now_ms.saturating_sub(started_ms) >= settings.repair_give_up_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_stops_at_its_cap_and_never_overflows() {
        let ms = |d: Duration| d.as_millis();
        let (first, max) = (Duration::from_millis(250), Duration::from_secs(8));
        let waits: Vec<u128> = (0..8).map(|n| ms(doubled(first, n, max))).collect();
        assert_eq!(waits, [250, 500, 1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
        assert_eq!(doubled(Duration::MAX, 40, Duration::MAX), Duration::MAX);
    }

    #[test]
    fn repair_schedule() {
        let delays: Vec<i64> = (0..7).map(|a| repair_delay_ms(a, 0.0)).collect();
        assert_eq!(
            delays,
            [2_000, 15_000, 30_000, 60_000, 300_000, 300_000, 300_000]
        );
        assert_eq!(repair_delay_ms(1, 1.0), 18_000);
        assert_eq!(repair_delay_ms(4, -1.0), 240_000);
        let s = HealthSettings::default();
        assert!(!repair_gave_up(0, 3_599_999, &s));
        assert!(repair_gave_up(0, 3_600_000, &s));
    }
}
