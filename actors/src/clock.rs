//! Wall-clock time as the protocol needs it (unix seconds / milliseconds), behind a trait so that
//! tests can run the gateway and the simulator on tokio's paused clock.
//!
//! `TokioClock` anchors unix time once and then follows `tokio::time::Instant`: in production it
//! advances with the monotonic clock; under `tokio::time::pause()` it advances with virtual time,
//! so timestamps in signatures, receipts and deadlines stay consistent with virtual sleeps.

use std::{
    fmt::Debug,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

/// Source of unix time.
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the unix epoch.
    fn now_ms(&self) -> i64;

    /// Whole seconds since the unix epoch (what the wire carries).
    fn now_unix(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

/// A clock shared between actors and servers.
pub type SharedClock = Arc<dyn Clock>;

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        system_now_ms()
    }
}

/// Unix time that follows tokio's clock from an anchor (see the module docs).
#[derive(Debug, Clone)]
pub struct TokioClock {
    anchor_ms: i64,
    anchor: tokio::time::Instant,
    /// Constant offset added to every reading (simulated clock skew).
    offset_ms: i64,
}

impl TokioClock {
    /// Anchored at the current system time.
    pub fn new() -> Self {
        Self::anchored_at(system_now_ms())
    }

    /// Anchored at a given unix time in milliseconds (deterministic tests).
    pub fn anchored_at(anchor_ms: i64) -> Self {
        TokioClock {
            anchor_ms,
            anchor: tokio::time::Instant::now(),
            offset_ms: 0,
        }
    }

    /// The same clock shifted by `offset_ms`.
    pub fn with_offset(&self, offset_ms: i64) -> Self {
        TokioClock {
            offset_ms,
            ..self.clone()
        }
    }

    /// Shared handle.
    pub fn shared(self) -> SharedClock {
        Arc::new(self)
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.anchor.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.anchor_ms
            .saturating_add(elapsed)
            .saturating_add(self.offset_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_virtual_time() {
        let c = TokioClock::anchored_at(1_700_000_000_000);
        assert_eq!(c.now_unix(), 1_700_000_000);
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        assert_eq!(c.now_unix(), 1_700_003_600);
        assert_eq!(c.with_offset(-5000).now_unix(), 1_700_003_595);
    }
}
