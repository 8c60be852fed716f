//! Messages between a race's attempt tasks and the `RaceActor`.

use actix::Message;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::{
    escrow::attempt::{AttemptEnd, AttemptVerdict},
    protocol::crypto::Address,
};

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

/// Debug view of a race.
#[derive(Debug, Message)]
#[rtype(result = "RaceSnapshot")]
pub struct GetRace;

/// What `GetRace` returns.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RaceSnapshot {
    pub race_id: u64,
    pub escrow_id: String,
    pub request_id: String,
    pub attempts: Vec<(u64, String, String)>,
    pub winner: Option<usize>,
}
