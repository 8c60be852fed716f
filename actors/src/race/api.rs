//! What the HTTP edge gives a race and gets back.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use serde::Serialize;
use slog::Logger;
use tokio::sync::{mpsc, oneshot};

use crate::{
    clock::SharedClock,
    directory::Directory,
    escrow::{messages::InferenceParams, EscrowActor},
    metrics::ActorMetrics,
    outcome::OutcomeClass,
    stats::{ActorRegistry, TrackedAddr},
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
    /// Longest SSE line read from a host, its `\n` included (default 16 MiB).
    pub sse_max_line_bytes: usize,
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
            sse_max_line_bytes: crate::protocol::sse::DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

/// Everything a race needs.
pub struct RaceSpec {
    pub race_id: u64,
    pub escrow_id: String,
    pub escrow: TrackedAddr<EscrowActor>,
    pub directory: TrackedAddr<Directory>,
    pub params: Arc<InferenceParams>,
    pub limits: RaceLimits,
    pub clock: SharedClock,
    pub log: Logger,
    pub metrics: ActorMetrics,
    /// Where the race registers its stats (debug listing).
    pub actors: ActorRegistry,
    /// Gets the race's nonces and attempts when it ends (request accounting).
    pub report: Option<oneshot::Sender<RaceReport>>,
    /// The error event of a winner that broke mid-stream.
    pub stream_error: StreamErrorFormat,
    /// Called once, when the race's first attempt is dispatched to its host: the gateway's own
    /// share of the request (pick, grant, durable diff) is done, and what follows is the host's.
    /// Dropped uncalled when no attempt was dispatched (the edge's overload limiter measures its
    /// latency sample with it: `src/overload/`).
    pub dispatched: Option<DispatchHook>,
}

/// See [`RaceSpec::dispatched`].
pub type DispatchHook = Box<dyn FnOnce() + Send>;

/// One attempt of a race (or a granted nonce no attempt used), as reported when the race ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptRecord {
    pub nonce: u64,
    /// The host's participant address.
    pub host: String,
    /// `primary`, `retry` (after a failure before content), `hedge` (the primary was slow) or
    /// `pair` (the primary's host is Suspect/Probation).
    pub role: &'static str,
    /// The host's health preference when it was picked (`healthy`, `doubtful`, …).
    pub preference: String,
    /// When the attempt was sent, from the race's start (ms); `None` if it never started.
    pub start_offset_ms: Option<i64>,
    /// From its send to its end (ms).
    pub duration_ms: Option<i64>,
    /// From its send to its first content (ms).
    pub first_content_ms: Option<i64>,
    /// `won`, `won_then_failed` (broke mid-stream), `failed`, `cancelled` (a loser, or not needed
    /// any more), `drained` (a Suspect/Probation loser run to its end), `client_gone`,
    /// `not_started` (granted after the winner or after the client left) or `running`.
    pub result: &'static str,
    /// Failure kind: `connect`, `transport`, `timeout`, `status_<code>`, `truncated`, `decode`,
    /// `empty_stream`, `error_event`, `stalled`, `receipt_rejected`.
    pub error: Option<String>,
    /// The failure as text.
    pub detail: Option<String>,
}

/// What a race reports when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RaceReport {
    pub race_id: u64,
    /// Every nonce the escrow granted this race, ascending.
    pub nonces: Vec<u64>,
    /// Attempts in start order, then unused grants.
    pub attempts: Vec<AttemptRecord>,
    /// Index of the crowned attempt.
    pub winner: Option<usize>,
}

/// Why a race failed before the client got any byte. Typed only: the HTTP edge's one table
/// (`src/http/error.rs`) turns it into a status and an OpenAI error type.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct RaceError {
    /// What kind of failure.
    pub kind: RaceErrorKind,
    /// What happened (the cause), for the user.
    pub message: String,
    /// `Retry-After` seconds, when useful.
    pub retry_after_s: Option<u64>,
}

/// The kinds of [`RaceError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RaceErrorKind {
    /// The escrow's queue of waiting requests is full.
    Saturated,
    /// The escrow takes no request now (shutting down, restarting).
    EscrowUnavailable,
    /// The escrow's hosts refuse connections; the request took no nonce (the reachability
    /// gate, `escrow/reach/mod.rs`).
    HostsUnreachable,
    /// Every host the request could use is being caught up in the background from far behind;
    /// the request took no nonce (`escrow/reach/mod.rs`).
    HostsCatchingUp,
    /// The escrow closed while the request was placed on it (draining for settlement or later,
    /// or at its serving nonce limit): the edge places the request on another escrow of the
    /// model, or answers 503 with `Retry-After` when there is none.
    EscrowClosed,
    /// The gateway's own store or protocol state failed.
    Internal,
    /// No host produced an answer: every host tried or none routable, a hedge that could not
    /// run, a failed host, an empty answer, an answer that failed verification.
    HostsFailed,
    /// The last host failed and asked to be retried later (it sent `Retry-After`).
    HostBusy,
    /// The host stopped sending before the answer was complete.
    Stalled,
    /// The host sent an error event; `host_status` is the status it named there, if any.
    HostErrorEvent { host_status: Option<u16> },
    /// The request was cancelled (its client left).
    Cancelled,
    /// Every host failed the same way (the correlation guard); the class of that fault.
    Shared(OutcomeClass),
}

/// Formats the SSE error event a streaming client gets when the winner breaks mid-stream (the
/// edge supplies it, so the client-facing shape is chosen there).
pub type StreamErrorFormat = fn(&str) -> Bytes;

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
