//! Messages between a race's attempt tasks and the `RaceActor`.

use actix::Message;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::{escrow::attempt::AttemptVerdict, outcome::AttemptEnd, protocol::crypto::Address};

/// An attempt produced its first content and asks to be crowned.
#[derive(Debug, Message)]
#[rtype(result = "Crown")]
pub struct FirstContent {
    pub idx: usize,
}

/// The race's answer to `FirstContent`.
#[derive(Debug)]
pub enum Crown {
    /// Winner in streaming mode: write every SSE byte to this sender.
    StreamTo(mpsc::Sender<Bytes>),
    /// Winner in non-streaming mode: report the body with `Delivered`.
    Collect,
    /// Another attempt won, or the client is gone: stop.
    Lose,
    /// Another attempt won, but this one (a Suspect/Probation host's) runs to its end without
    /// forwarding, so the host can finish the work it was given and earn probation credit.
    Drain,
}

/// An attempt's receipt arrived (hedge progress).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ReceiptSeen {
    pub idx: usize,
}

/// The crowned non-streaming attempt has the whole answer.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Delivered {
    pub idx: usize,
    pub body: Bytes,
}

/// An attempt task is over; `verdict` is the escrow's answer to its report.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AttemptFinished {
    pub idx: usize,
    pub host: Address,
    pub end: AttemptEnd,
    pub verdict: AttemptVerdict,
    pub crowned: bool,
}

/// How the race was shaped when its primary was granted (logged as `decision_made`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RaceShape {
    /// `pair_with_healthy`, `hedge_now` or `primary_then_hedge_if_slow`.
    pub decision: &'static str,
    /// When a hedge becomes due if the primary is still slow (unix ms); `None`: no hedge planned.
    pub hedge_due_ms: Option<i64>,
}

/// A race's full state, as the debug endpoint shows it (answer to `stats::Describe`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RaceView {
    pub race_id: u64,
    pub escrow_id: String,
    pub request_id: String,
    /// Unix ms.
    pub started_at: i64,
    pub shape: Option<RaceShape>,
    /// A hedge timer is armed (the primary has not shown content yet).
    pub hedge_armed: bool,
    /// Attempts with their timings, then grants that no attempt used.
    pub attempts: Vec<super::api::AttemptRecord>,
    /// Index of the crowned attempt.
    pub winner: Option<usize>,
    /// Attempts whose content waits for the crown decision.
    pub awaiting_crown: Vec<usize>,
}
