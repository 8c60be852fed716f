//! Back-off after a host answered 429 or 503 (HEALTH.md §7): `Retry-After` (delay-seconds or an
//! HTTP-date) is honoured exactly; without it the delay doubles per consecutive throttle from
//! `backoff_initial_ms` up to `backoff_max_ms`. Pure: the caller passes the time.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Longest `Retry-After` honoured (a larger value is clamped to this; documented).
pub const MAX_RETRY_AFTER_MS: i64 = 86_400_000;

/// A parsed `Retry-After` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfter {
    /// `Retry-After: 120`.
    Seconds(u64),
    /// `Retry-After: Wed, 21 Oct 2026 07:28:00 GMT`, as unix milliseconds.
    At(i64),
}

impl RetryAfter {
    /// Parses either form; `None` for anything else.
    pub fn parse(value: &str) -> Option<RetryAfter> {
        let v = value.trim();
        if let Ok(secs) = v.parse::<u64>() {
            return Some(RetryAfter::Seconds(secs));
        }
        let date: awc::http::header::HttpDate = v.parse().ok()?;
        let t: SystemTime = date.into();
        let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis();
        Some(RetryAfter::At(i64::try_from(ms).ok()?))
    }

    /// The unix-ms deadline this header sets when received at `now_ms`.
    pub fn deadline(&self, now_ms: i64) -> i64 {
        let delay = match *self {
            RetryAfter::Seconds(s) => i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1_000),
            RetryAfter::At(at) => at.saturating_sub(now_ms),
        };
        now_ms.saturating_add(delay.clamp(0, MAX_RETRY_AFTER_MS))
    }
}

/// Back-off policy (from the settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub initial_ms: u64,
    pub max_ms: u64,
}

/// Back-off state of one host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Backoff {
    /// Consecutive throttled answers (0 = not backing off).
    pub level: u32,
    /// No request to the host before this unix-ms time.
    pub until_ms: i64,
    /// The delay set by the last throttle, ms.
    pub last_delay_ms: i64,
    /// Whether the last delay came from `Retry-After`.
    pub from_retry_after: bool,
}

impl Backoff {
    /// A 429/503 arrived at `now_ms`; returns the new deadline. The deadline never moves earlier
    /// (two throttles in flight at once keep the later one).
    pub fn throttled(
        &mut self,
        now_ms: i64,
        retry_after: Option<RetryAfter>,
        policy: BackoffPolicy,
    ) -> i64 {
        let (deadline, from_header) = match retry_after {
            Some(ra) => (ra.deadline(now_ms), true),
            None => {
                let factor = 1u64.checked_shl(self.level.min(40)).unwrap_or(u64::MAX);
                let delay = policy
                    .initial_ms
                    .saturating_mul(factor)
                    .min(policy.max_ms.max(policy.initial_ms));
                (
                    now_ms.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX)),
                    false,
                )
            }
        };
        self.level = self.level.saturating_add(1);
        self.last_delay_ms = deadline - now_ms;
        self.from_retry_after = from_header;
        self.until_ms = self.until_ms.max(deadline);
        self.until_ms
    }

    /// Any answer that is not a throttle ends the streak (the deadline, if later, still holds).
    pub fn answered(&mut self) {
        self.level = 0;
    }

    /// Milliseconds left at `now_ms` (0 when not backing off).
    pub fn remaining_ms(&self, now_ms: i64) -> i64 {
        (self.until_ms - now_ms).max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: BackoffPolicy = BackoffPolicy {
        initial_ms: 30_000,
        max_ms: 600_000,
    };

    #[test]
    fn parses_both_forms() {
        assert_eq!(RetryAfter::parse(" 120 "), Some(RetryAfter::Seconds(120)));
        // 2023-11-14T22:15:20Z = 1_700_000_120 s.
        assert_eq!(
            RetryAfter::parse("Tue, 14 Nov 2023 22:15:20 GMT"),
            Some(RetryAfter::At(1_700_000_120_000))
        );
        assert_eq!(RetryAfter::parse("soon"), None);
        assert_eq!(RetryAfter::parse("-5"), None);
        // Every HTTP-date form (RFC 9110 §5.6.7) of 1994-11-06T08:49:37Z, and malformed ones.
        for date in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                RetryAfter::parse(date),
                Some(RetryAfter::At(784_111_777_000)),
                "{date}"
            );
        }
        for bad in [
            "",
            "1.5",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(RetryAfter::parse(bad), None, "{bad}");
        }
        assert_eq!(RetryAfter::parse(" 0 "), Some(RetryAfter::Seconds(0)));
        let at = RetryAfter::At(1_700_000_120_000);
        assert_eq!(at.deadline(1_700_000_000_000), 1_700_000_120_000);
        assert_eq!(
            at.deadline(1_700_000_200_000),
            1_700_000_200_000,
            "past date"
        );
        assert_eq!(RetryAfter::Seconds(120).deadline(1_000), 121_000);
        assert_eq!(
            RetryAfter::Seconds(u64::MAX).deadline(0),
            MAX_RETRY_AFTER_MS
        );
    }

    #[test]
    fn doubles_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let mut now = 0;
        let mut delays = Vec::new();
        for _ in 0..7 {
            let until = b.throttled(now, None, P);
            delays.push(until - now);
            now = until;
        }
        assert_eq!(
            delays,
            vec![30_000, 60_000, 120_000, 240_000, 480_000, 600_000, 600_000]
        );
        b.answered();
        assert_eq!(b.throttled(now, None, P) - now, 30_000);
    }

    #[test]
    fn retry_after_is_exact_and_never_shortens() {
        let mut b = Backoff::default();
        assert_eq!(b.throttled(0, Some(RetryAfter::Seconds(120)), P), 120_000);
        assert!(b.from_retry_after);
        assert_eq!(b.throttled(1, Some(RetryAfter::Seconds(1)), P), 120_000);
        assert_eq!(b.remaining_ms(100_000), 20_000);
        assert_eq!(b.remaining_ms(200_000), 0);
    }
}
