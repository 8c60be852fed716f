//! What the HTTP edge gives a race and gets back.

use std::{sync::Arc, time::Duration};

use actix::Addr;
use bytes::Bytes;
use serde::Serialize;
use slog::Logger;
use tokio::sync::{mpsc, oneshot};

use crate::{
    clock::SharedClock,
    directory::Directory,
    escrow::{messages::InferenceParams, EscrowActor},
    metrics::ActorMetrics,
};

/// Bytes of SSE towards the client (already framed: `data: …\n\n`).
pub type ClientStream = mpsc::Receiver<Bytes>;

/// Capacity of the channel to one streaming client (backpressure on the winning host).
pub const CLIENT_CHANNEL_CAPACITY: usize = 64;

/// Limits of one race.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RaceLimits {
    /// Attempts (nonces) a request may use, failure-driven retries included.
    pub max_attempts: usize,
    /// An attempt with no receipt by then is abandoned (and may be retried).
    pub receipt_timeout: Duration,
    /// No chunk for this long after the receipt: the attempt stalled.
    pub stall_timeout: Duration,
    /// Hard cap on one attempt.
    pub attempt_timeout: Duration,
    /// After the client left, the winner's stream is still drained this long for its finish.
    pub meta_drain: Duration,
    /// How long a Suspect/Probation attempt's content waits for a Healthy attempt's (ms).
    pub suspect_hold_ms: i64,
}

impl Default for RaceLimits {
    fn default() -> Self {
        RaceLimits {
            max_attempts: 3,
            receipt_timeout: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(20 * 60),
            meta_drain: Duration::from_secs(30),
            suspect_hold_ms: 500,
        }
    }
}

/// Everything a race needs.
pub struct RaceSpec {
    pub race_id: u64,
    pub escrow_id: String,
    pub escrow: Addr<EscrowActor>,
    pub directory: Addr<Directory>,
    pub params: Arc<InferenceParams>,
    pub limits: RaceLimits,
    pub clock: SharedClock,
    pub log: Logger,
    pub metrics: ActorMetrics,
}

/// Why a race failed before the client got any byte (mapped to an HTTP error at the edge).
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct RaceError {
    /// HTTP status for the client (502 hosts failed, 503 unavailable, 504 timed out, 429 …).
    pub status: u16,
    /// OpenAI error `type` (`upstream_error`, `service_unavailable`, `timeout`, …).
    pub kind: String,
    /// What happened, for the user.
    pub message: String,
    /// `Retry-After` seconds, when useful.
    pub retry_after_s: Option<u64>,
}

/// The first thing a race tells the edge: the answer starts (stream) / is complete (whole), or
/// it failed before any byte.
#[derive(Debug)]
pub enum RaceStart {
    /// Streaming: every SSE byte for the client, starting with the winner's first chunk and
    /// ending with `data: [DONE]` (or an error event if the winner broke mid-stream).
    Stream(ClientStream),
    /// Non-streaming: the assembled `chat.completion` JSON body.
    Whole(Bytes),
}

/// Receiver of the race's start.
pub type RaceReply = oneshot::Receiver<Result<RaceStart, RaceError>>;
