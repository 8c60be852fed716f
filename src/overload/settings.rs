//! `[overload]`: the adaptive concurrency limit and its queue, as read from the file and
//! validated. The limit never exceeds `max_concurrent_races` (the hard ceiling on every race in
//! flight, streams included); `initial_limit` and `min_limit` above it are lowered to it.
//!
//! ```toml
//! [overload]
//! enabled = true            # false: only max_concurrent_races limits (no queue)
//! initial_limit = 64        # races starting at once (admission → dispatch to a host) at start
//! min_limit = 16            # the limit never falls below this
//! queue_depth = 1024        # requests waiting for a slot (more while limit·timeout/latency
//!                           # drains them in time, up to 8×, with release_at_dispatch)
//! queue_timeout_ms = 2000   # a request waiting longer gets 503
//! window_ms = 250           # a window closes after this long …
//! window_samples = 10       # … and at least this many samples
//! tolerance = 1.5           # latency may rise this much over its long-term level
//! smoothing = 0.2           # how far the limit moves toward its target per window
//! long_window = 100         # windows the long-term latency averages over
//! retry_after_s = 1         # Retry-After of a shed request
//! release_at_dispatch = false # free the slot at dispatch, not at the first byte (with
//!                           # `[escrow] link_pacing`; issue 16, opt-in: see the README)
//! ```

use serde::{Deserialize, Serialize};

use super::gradient::GradientParams;

/// `[overload]` (see the module docs for every default).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OverloadSettings {
    pub enabled: bool,
    pub initial_limit: usize,
    pub min_limit: usize,
    pub queue_depth: usize,
    pub queue_timeout_ms: u64,
    pub window_ms: u64,
    pub window_samples: u32,
    pub tolerance: f64,
    pub smoothing: f64,
    pub long_window: u32,
    pub retry_after_s: u64,
    /// Free a race's starting slot when its first attempt is dispatched, instead of at its
    /// first byte (opt-in; pair it with `[escrow] link_pacing`).
    pub release_at_dispatch: bool,
}

impl Default for OverloadSettings {
    fn default() -> Self {
        OverloadSettings {
            enabled: true,
            initial_limit: 64,
            min_limit: 16,
            queue_depth: 1_024,
            queue_timeout_ms: 2_000,
            window_ms: 250,
            window_samples: 10,
            tolerance: 1.5,
            smoothing: 0.2,
            long_window: 100,
            retry_after_s: 1,
            release_at_dispatch: false,
        }
    }
}

impl OverloadSettings {
    /// The first invalid key (`overload.…`) and why, if any.
    pub fn invalid(&self) -> Option<(&'static str, String)> {
        let checks: [(&'static str, bool, &str); 7] = [
            (
                "overload.min_limit",
                self.min_limit >= 1,
                "must be at least 1",
            ),
            (
                "overload.initial_limit",
                self.initial_limit >= self.min_limit,
                "must be at least min_limit",
            ),
            (
                "overload.queue_timeout_ms",
                self.queue_timeout_ms >= 1,
                "must be at least 1",
            ),
            (
                "overload.window_ms",
                self.window_ms >= 1,
                "must be at least 1",
            ),
            (
                "overload.tolerance",
                self.tolerance.is_finite() && self.tolerance >= 1.0,
                "must be a number ≥ 1.0",
            ),
            (
                "overload.smoothing",
                self.smoothing > 0.0 && self.smoothing <= 1.0,
                "must be in (0, 1]",
            ),
            (
                "overload.long_window",
                self.long_window >= 1,
                "must be at least 1",
            ),
        ];
        checks
            .into_iter()
            .find(|(_, ok, _)| !ok)
            .map(|(field, _, why)| (field, why.to_string()))
    }

    /// The update's parameters under the hard ceiling `ceiling`.
    pub fn params(&self, ceiling: usize) -> GradientParams {
        let max = ceiling.max(1) as f64;
        GradientParams {
            min_limit: (self.min_limit as f64).min(max),
            max_limit: max,
            tolerance: self.tolerance,
            smoothing: self.smoothing,
            long_window: f64::from(self.long_window),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_each_bad_field_is_named() {
        assert_eq!(OverloadSettings::default().invalid(), None);
        let bad = |f: fn(&mut OverloadSettings)| {
            let mut s = OverloadSettings::default();
            f(&mut s);
            s.invalid().map(|(field, _)| field)
        };
        assert_eq!(bad(|s| s.min_limit = 0), Some("overload.min_limit"));
        assert_eq!(bad(|s| s.initial_limit = 4), Some("overload.initial_limit"));
        assert_eq!(
            bad(|s| s.queue_timeout_ms = 0),
            Some("overload.queue_timeout_ms")
        );
        assert_eq!(bad(|s| s.tolerance = 0.5), Some("overload.tolerance"));
        assert_eq!(bad(|s| s.smoothing = 0.0), Some("overload.smoothing"));
        assert_eq!(bad(|s| s.long_window = 0), Some("overload.long_window"));
        let p = OverloadSettings::default().params(4);
        assert_eq!((p.min_limit, p.max_limit), (4.0, 4.0), "the ceiling wins");
    }
}
