//! What the limiter answers and shows: a shed request and its reason, the limiter's view, and
//! the depth its queue may reach.

use serde::Serialize;

/// Why a request was shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShedReason {
    /// The queue was full.
    QueueFull,
    /// It waited `queue_timeout_ms` without a slot.
    QueueTimeout,
}

impl ShedReason {
    /// `reason` label of `devshard_gateway_limit_rejections_total`.
    pub fn label(self) -> &'static str {
        match self {
            ShedReason::QueueFull => "queue_full",
            ShedReason::QueueTimeout => "queue_timeout",
        }
    }
}

/// A shed request (answered 503 + `Retry-After` at the edge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    pub reason: ShedReason,
    pub retry_after_s: u64,
    /// The limit when it was shed.
    pub limit: usize,
}

/// What `/v1/debug/actors` shows of the limiter.
#[derive(Debug, Clone, Serialize)]
pub struct LimiterView {
    pub enabled: bool,
    pub limit: usize,
    pub ceiling: usize,
    pub starting: usize,
    pub queued: usize,
    pub queue_depth: usize,
    pub long_rtt_ms: Option<f64>,
    pub last_window_rtt_ms: Option<f64>,
    pub admitted: u64,
    pub shed_queue_full: u64,
    pub shed_queue_timeout: u64,
}

/// The queue's depth may grow to this many times `queue_depth` ([`effective_depth`]).
pub const DEPTH_CAP_FACTOR: usize = 8;

/// How many requests may queue: `configured`, or as many as `limit` slots admit within the
/// deadline at the last window's latency (`limit · timeout / rtt`), at most
/// [`DEPTH_CAP_FACTOR`] × `configured`. Without a measured latency, `configured`.
pub fn effective_depth(
    configured: usize,
    limit: usize,
    timeout_ms: u64,
    rtt_ms: Option<f64>,
) -> usize {
    let Some(rtt) = rtt_ms.filter(|r| *r > 0.0 && r.is_finite()) else {
        return configured;
    };
    let drains = limit as f64 * timeout_ms as f64 / rtt;
    let cap = configured.saturating_mul(DEPTH_CAP_FACTOR);
    (drains.min(cap as f64) as usize).max(configured)
}
