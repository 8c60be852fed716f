//! Back-off with jitter: the repair loop's schedule (HEALTH.md §6.4: 2 s first, then 15 s → 30 s →
//! 60 s → 300 s, ±20 %) and the chain poller's (§7: intervals ±10 %, ×2 up to 600 s after a 429/503,
//! `Retry-After` in seconds or HTTP-date honoured exactly).
//!
//! Jitter is an explicit draw in `[-1, 1]` ([`jitter_draw`] makes one from any `rand::Rng`), so
//! callers and tests are deterministic. A `Retry-After` deadline is never shortened by jitter.

use rand::Rng;

use super::settings::HealthSettings;

/// Delay before a repair loop's first tick (no jitter).
pub const REPAIR_FIRST_DELAY_MS: i64 = 2_000;
/// Delays between later repair ticks; the last one repeats.
pub const REPAIR_DELAYS_MS: [i64; 4] = [15_000, 30_000, 60_000, 300_000];
/// ± fraction of jitter on repair delays.
pub const REPAIR_JITTER: f64 = 0.2;
/// ± fraction of jitter on poll intervals.
pub const POLL_JITTER: f64 = 0.1;
/// Cap of the poller's exponential back-off.
pub const POLL_BACKOFF_MAX_MS: i64 = 600_000;

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

/// Next regular poll: `interval_ms ± 10 %`.
pub fn poll_delay_ms(interval_ms: i64, draw: f64) -> i64 {
    jittered_ms(interval_ms, POLL_JITTER, draw)
}

/// Back-off after `failures` consecutive throttled polls without `Retry-After`:
/// `interval × 2^failures ± 10 %`, never above 600 s.
pub fn poll_backoff_ms(interval_ms: i64, failures: u32, draw: f64) -> i64 {
    let raw = interval_ms
        .max(1)
        .saturating_mul(1i64 << failures.min(40))
        .min(POLL_BACKOFF_MAX_MS);
    jittered_ms(raw, POLL_JITTER, draw).min(POLL_BACKOFF_MAX_MS)
}

/// Earliest next request after a throttled poll: `Retry-After` exactly when given (never before
/// it), otherwise the exponential back-off.
pub fn throttled_until_ms(
    now_ms: i64,
    retry_after_ms: Option<i64>,
    interval_ms: i64,
    failures: u32,
    draw: f64,
) -> i64 {
    let delay = match retry_after_ms {
        Some(ms) => ms.max(0),
        None => poll_backoff_ms(interval_ms, failures, draw),
    };
    now_ms.saturating_add(delay)
}

/// Milliseconds to wait from `now_ms` for a `Retry-After` value: delta-seconds or an HTTP-date
/// (IMF-fixdate, RFC 850 or asctime). A date in the past gives 0; garbage gives `None`.
pub fn parse_retry_after(value: &str, now_ms: i64) -> Option<i64> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        let secs = v.parse::<i64>().unwrap_or(i64::MAX);
        return Some(secs.saturating_mul(1000));
    }
    let at_ms = parse_http_date(v)?.saturating_mul(1000);
    Some(at_ms.saturating_sub(now_ms).max(0))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

fn month(name: &str) -> Option<i64> {
    let lower = name.to_ascii_lowercase();
    let i = MONTHS.iter().position(|m| *m == lower)?;
    i64::try_from(i).ok().map(|i| i + 1)
}

fn number(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn clock(s: &str) -> Option<i64> {
    let mut parts = s.split(':');
    let (h, m, sec) = (
        number(parts.next()?)?,
        number(parts.next()?)?,
        number(parts.next()?)?,
    );
    if parts.next().is_some() || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    Some(h * 3600 + m * 60 + sec.min(59))
}

/// Unix seconds of an HTTP-date (RFC 9110 §5.6.7).
fn parse_http_date(s: &str) -> Option<i64> {
    let t: Vec<&str> = s.split_whitespace().collect();
    let (year, mon, day, time) = match t.as_slice() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        [_, d, m, y, hms, "GMT"] if y.len() == 4 => (number(y)?, month(m)?, number(d)?, hms),
        // Sunday, 06-Nov-94 08:49:37 GMT
        [_, dmy, hms, "GMT"] => {
            let mut p = dmy.split('-');
            let (d, m, yy) = (number(p.next()?)?, month(p.next()?)?, p.next()?);
            if p.next().is_some() || yy.len() != 2 {
                return None;
            }
            let yy = number(yy)?;
            (if yy < 70 { 2000 + yy } else { 1900 + yy }, m, d, hms)
        }
        // Sun Nov  6 08:49:37 1994
        [_, m, d, hms, y] if y.len() == 4 => (number(y)?, month(m)?, number(d)?, hms),
        _ => return None,
    };
    if !(1..=31).contains(&day) {
        return None;
    }
    Some(days_from_civil(year, mon, day) * 86_400 + clock(time)?)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1994-11-06T08:49:37Z.
    const RFC_EXAMPLE_S: i64 = 784_111_777;

    #[test]
    fn retry_after_seconds_and_all_date_forms() {
        let now = (RFC_EXAMPLE_S - 10) * 1000;
        assert_eq!(parse_retry_after("120", now), Some(120_000));
        assert_eq!(parse_retry_after(" 0 ", now), Some(0));
        for date in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_retry_after(date, now), Some(10_000), "{date}");
        }
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now + 60_000),
            Some(0)
        );
        for bad in [
            "",
            "-5",
            "1.5",
            "soon",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad}");
        }
        assert_eq!(parse_retry_after("99999999999999999999", 0), Some(i64::MAX));
    }

    #[test]
    fn repair_schedule_and_poll_backoff() {
        let delays: Vec<i64> = (0..7).map(|a| repair_delay_ms(a, 0.0)).collect();
        assert_eq!(
            delays,
            [2_000, 15_000, 30_000, 60_000, 300_000, 300_000, 300_000]
        );
        assert_eq!(repair_delay_ms(1, 1.0), 18_000);
        assert_eq!(repair_delay_ms(4, -1.0), 240_000);
        assert_eq!(poll_backoff_ms(20_000, 0, 0.0), 20_000);
        assert_eq!(poll_backoff_ms(20_000, 3, 0.0), 160_000);
        assert_eq!(poll_backoff_ms(20_000, 10, 1.0), POLL_BACKOFF_MAX_MS);
        assert_eq!(poll_delay_ms(20_000, -1.0), 18_000);
        assert_eq!(
            throttled_until_ms(1_000, Some(5_000), 20_000, 9, 1.0),
            6_000
        );
        let s = HealthSettings::default();
        assert!(!repair_gave_up(0, 3_599_999, &s));
        assert!(repair_gave_up(0, 3_600_000, &s));
    }
}
