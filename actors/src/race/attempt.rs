//! One attempt as an async task on the race's arbiter: its sends (catch-up prelude and the
//! inference POST, each signed as it leaves: `sends.rs`), SSE parsing, crowning, forwarding, and
//! the final report to the escrow and the race.
//!
//! Pre-crown bytes are buffered; the first content asks the race for the crown. A crowned
//! streaming attempt writes straight to the client channel (bounded: a slow client slows the host
//! stream, never memory). After `[DONE]` the stream is still read for `devshard_meta` (the finish
//! marker), up to `meta_drain`.
//!
//! Timers while reading: `receipt_timeout` until the receipt; then, for a streaming request,
//! `stall_timeout` between chunks. A non-streaming host writes nothing between its receipt and
//! the whole body, so `stream: false` runs no stall timer there: only the hard
//! `attempt_timeout` (20 min, upstream's bound) and the escrow's `execution_timeout` from the
//! receipt (the protocol's deadline; the nonce is then the escrow's to time out by vote) end a
//! long answer. A loser left to drain has the same bounds (commit seed `6264415078546872101`: a
//! host stalled after its receipt held a draining loser's nonce for the 20 min bound, far past
//! its 30 s execution deadline, and the escrow could not settle).
//!
//! End of stream: before any terminator it is a truncation (a host fault). After the receipt
//! without `[DONE]` it is classified as upstream does: no content → an empty stream (upstream's
//! reading of a receipt as a terminator); content already read → a truncation mid-answer.

use bytes::Bytes;
use tokio::{
    sync::{mpsc, watch},
    time::timeout,
};

use super::{
    actor::RaceActor,
    assemble::Assembler,
    host_answers,
    messages::{AttemptFinished, Crown, Delivered, FirstContent, ReceiptSeen},
};
use crate::{
    clock::SharedClock,
    escrow::{
        attempt::{AttemptReport, AttemptVerdict},
        messages::{AttemptEnded, AttemptReceipt, NonceGrant},
        EscrowActor,
    },
    host::HostError,
    outcome::{AttemptEnd, AttemptTimings},
    protocol::{
        proto::DevshardTx,
        sse::{self, HostEvent, MalformedKind},
    },
    stats::TrackedAddr,
};

use super::api::{RaceLimits, StreamErrorFormat};

/// What an attempt task needs.
pub(super) struct AttemptTask {
    pub idx: usize,
    pub grant: NonceGrant,
    pub race: TrackedAddr<RaceActor>,
    pub escrow: TrackedAddr<EscrowActor>,
    pub clock: SharedClock,
    pub limits: RaceLimits,
    pub input_bytes: u64,
    /// The client asked for `stream: true` (the stall timer runs only then).
    pub stream: bool,
    pub log: slog::Logger,
    pub cancel: watch::Receiver<CancelSignal>,
    pub stream_error: StreamErrorFormat,
    pub metrics: crate::metrics::ActorMetrics,
}

/// What the race tells a running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CancelSignal {
    Running,
    /// Another attempt won. Without a receipt the attempt stops (`Cancelled`); with one it
    /// drains to its finish (its receipt may have reached the race after the crown decision).
    LostRace,
    /// Stop now (the client left, a shared fault): `Cancelled`.
    Stop,
}

/// Mutable progress of the attempt.
struct Progress {
    timings: AttemptTimings,
    buffer: Vec<Bytes>,
    sink: Option<mpsc::Sender<Bytes>>,
    collect: Option<Assembler>,
    crowned: bool,
    done: bool,
    mempool: Option<Vec<DevshardTx>>,
    client_gone: bool,
    /// Lost the crown but runs to its end without forwarding (probation credit).
    draining: bool,
    /// Told it lost before its receipt: it drains once the receipt comes (within the receipt
    /// timeout), else it ends `Cancelled`.
    lost: bool,
    /// The protocol's execution deadline, from the receipt (`grant.execution_timeout` later).
    execution_deadline: Option<tokio::time::Instant>,
}

impl AttemptTask {
    pub(super) async fn run(mut self) {
        let mut p = Progress {
            timings: AttemptTimings {
                send_ms: self.clock.now_ms(),
                input_bytes: self.input_bytes,
                ..Default::default()
            },
            buffer: Vec::new(),
            sink: None,
            collect: None,
            crowned: false,
            done: false,
            mempool: None,
            client_gone: false,
            draining: false,
            lost: false,
            execution_deadline: None,
        };
        let end = self.drive(&mut p).await;
        let end = match (&end, p.client_gone) {
            (AttemptEnd::Completed, true) => AttemptEnd::Completed,
            (_, true) => AttemptEnd::ClientGone,
            _ => end,
        };
        if let (Some(sink), false) = (&p.sink, matches!(end, AttemptEnd::Completed)) {
            let _ = sink
                .send((self.stream_error)(&host_answers::mid_stream_message(&end)))
                .await;
        }
        drop(p.sink.take());
        p.timings.end_ms = self.clock.now_ms();
        let report = AttemptReport {
            timings: p.timings,
            end: end.clone(),
            mempool: p.mempool.take(),
            crowned: p.crowned,
        };
        let ended = AttemptEnded {
            nonce: self.grant.nonce,
            host: self.grant.host.clone(),
            report,
        };
        let verdict = self
            .escrow
            .send(ended)
            .await
            .unwrap_or_else(|_| AttemptVerdict::default());
        self.race.do_send(AttemptFinished {
            idx: self.idx,
            host: self.grant.host.clone(),
            end,
            verdict,
            crowned: p.crowned,
        });
    }

    async fn drive(&mut self, p: &mut Progress) -> AttemptEnd {
        let mut stream = match self.send_request().await {
            Ok(s) => s,
            Err(end) => return end,
        };
        let hard_deadline = tokio::time::Instant::now() + self.limits.attempt_timeout;
        loop {
            let deadline = p
                .execution_deadline
                .map_or(hard_deadline, |d| d.min(hard_deadline));
            let wait = self.read_limit(p);
            let read = stream.next_events();
            let next = tokio::select! {
                r = async {
                    match wait {
                        Some(w) => timeout(w, read).await.map_err(|_| w),
                        None => Ok(read.await),
                    }
                } => r,
                changed = self.cancel.changed() => {
                    let signal = changed.map_or(CancelSignal::Stop, |()| *self.cancel.borrow());
                    if self.lost_but_drains(signal, p) {
                        continue;
                    }
                    return AttemptEnd::Cancelled;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if deadline < hard_deadline {
                        let role = if p.crowned { "crowned" } else { "uncrowned" };
                        slog::info!(self.log, "attempt reached its execution deadline";
                            "stage" => "attempt_execution_deadline", "nonce" => self.grant.nonce,
                            "role" => role);
                        self.metrics.execution_deadlines.with_label_values(&[role]).inc();
                    }
                    return AttemptEnd::Stalled;
                }
            };
            let events = match next {
                Err(_) if p.done => break,
                Err(_) if p.timings.receipt_ms.is_none() && p.lost => return AttemptEnd::Cancelled,
                Err(w) if p.timings.receipt_ms.is_none() => {
                    return AttemptEnd::Host(HostError::Timeout(w))
                }
                Err(_) => return AttemptEnd::Stalled,
                Ok(Err(e)) if p.done => {
                    let _ = e;
                    break;
                }
                Ok(Err(e)) => return AttemptEnd::Host(e),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(events))) => events,
            };
            for event in events {
                if let Some(end) = self.on_event(event, p).await {
                    return end;
                }
            }
        }
        end_of_stream(p)
    }

    /// Whether a `LostRace` signal leaves this attempt draining (it has a receipt) instead of
    /// cancelled; switches it to draining if so.
    fn lost_but_drains(&self, signal: CancelSignal, p: &mut Progress) -> bool {
        let drains = match signal {
            CancelSignal::Running => true,
            CancelSignal::LostRace => !p.crowned,
            CancelSignal::Stop => false,
        };
        if drains && signal == CancelSignal::LostRace && p.timings.receipt_ms.is_none() {
            // Its host may have the Start already: wait (receipt timeout) for the receipt, then
            // drain, so our own cancellation never leaves an honest host a refused timeout.
            p.lost = true;
        } else if drains && signal == CancelSignal::LostRace && !p.draining {
            p.draining = true;
            p.buffer.clear();
            slog::info!(self.log, "loser left to drain to its finish"; "stage" => "loser_draining",
                "nonce" => self.grant.nonce, "why" => "receipt");
        }
        drains
    }

    /// How long the next read may take: `None` = no timer but the attempt's hard deadline.
    fn read_limit(&self, p: &Progress) -> Option<std::time::Duration> {
        if p.done {
            Some(self.limits.meta_drain)
        } else if p.timings.receipt_ms.is_none() {
            Some(self.limits.receipt_timeout)
        } else if self.stream {
            Some(self.limits.stall_timeout)
        } else {
            None
        }
    }

    async fn on_event(&mut self, event: HostEvent, p: &mut Progress) -> Option<AttemptEnd> {
        let now = self.clock.now_ms();
        match event {
            HostEvent::Receipt(receipt) => {
                if p.timings.receipt_ms.is_none() {
                    self.race.do_send(ReceiptSeen { idx: self.idx });
                }
                p.timings.receipt_ms.get_or_insert(now);
                if p.execution_deadline.is_none() {
                    p.execution_deadline = self
                        .grant
                        .execution_timeout
                        .map(|t| tokio::time::Instant::now() + t);
                }
                if p.lost && !p.draining {
                    p.draining = true;
                    p.buffer.clear();
                }
                super::prewarm::receipt(&self.grant.verify, self.grant.nonce, &receipt);
                let msg = AttemptReceipt {
                    nonce: self.grant.nonce,
                    catch_up: false,
                    host: self.grant.host.clone(),
                    receipt,
                };
                match self.escrow.send(msg).await {
                    Ok(Err(e)) => return Some(AttemptEnd::ReceiptRejected(e)),
                    Err(_) => return Some(AttemptEnd::EscrowGone),
                    Ok(Ok(())) => {}
                }
            }
            HostEvent::Chunk(json) => {
                p.timings.first_token_ms.get_or_insert(now);
                let has_content = sse::chunk_has_content(&json);
                if has_content {
                    p.timings.content_chunks = p.timings.content_chunks.saturating_add(1);
                }
                if p.crowned {
                    self.forward(json, p).await;
                } else if p.draining {
                    // Lost the crown: read to the end, forward nothing.
                } else {
                    p.buffer.push(json);
                    if has_content {
                        p.timings.first_content_ms = Some(now);
                        if let Some(end) = self.crown(p).await {
                            return Some(end);
                        }
                    }
                }
            }
            HostEvent::Error(json) => {
                let (status, message) = host_answers::error_details(&json);
                return Some(AttemptEnd::ErrorEvent { status, message });
            }
            HostEvent::Done => {
                p.done = true;
                if p.crowned {
                    self.deliver(p).await;
                }
            }
            HostEvent::Meta(txs) => {
                super::prewarm::mempool(&txs);
                p.mempool = Some(txs);
            }
            HostEvent::Malformed(m) if m.kind == MalformedKind::TooLarge && p.done => {
                // A meta event over the line cap after `[DONE]`: the answer is delivered, only
                // the mempool is unknown (the finish is looked for as for a missing meta).
                slog::warn!(self.log, "meta event over the SSE line limit after [DONE]; ignored";
                    "stage" => "meta_too_large", "nonce" => self.grant.nonce,
                    "limit" => self.limits.sse_max_line_bytes, "reason" => m.reason);
                return Some(end_of_stream(p));
            }
            HostEvent::Malformed(m) if m.kind == MalformedKind::TooLarge => {
                return Some(AttemptEnd::Host(HostError::Decode(m.reason)));
            }
            HostEvent::Malformed(_) => {}
        }
        None
    }

    async fn crown(&mut self, p: &mut Progress) -> Option<AttemptEnd> {
        match self.race.send(FirstContent { idx: self.idx }).await {
            Ok(Crown::StreamTo(tx)) => {
                p.crowned = true;
                p.sink = Some(tx);
            }
            Ok(Crown::Collect) => {
                p.crowned = true;
                p.collect = Some(Assembler::default());
            }
            Ok(Crown::Drain) => {
                p.draining = true;
                p.buffer.clear();
                return None;
            }
            Ok(Crown::Lose) | Err(_) => return Some(AttemptEnd::Cancelled),
        }
        for json in std::mem::take(&mut p.buffer) {
            self.forward(json, p).await;
        }
        None
    }

    async fn forward(&self, json: Bytes, p: &mut Progress) {
        if let Some(a) = p.collect.as_mut() {
            a.push(&json);
            return;
        }
        if let Some(sink) = &p.sink {
            if sink.send(sse::data_event(&json)).await.is_err() {
                p.client_gone = true;
                p.sink = None;
            }
        }
    }

    async fn deliver(&self, p: &mut Progress) {
        if let Some(sink) = p.sink.take() {
            let _ = sink.send(Bytes::from_static(sse::DONE_EVENT)).await;
        }
        if let Some(a) = p.collect.take() {
            self.race.do_send(Delivered {
                idx: self.idx,
                body: a.finish(),
            });
        }
    }
}

/// The end of a host stream that closed cleanly (see the module docs).
fn end_of_stream(p: &Progress) -> AttemptEnd {
    match (
        p.done,
        p.timings.receipt_ms.is_some(),
        p.timings.content_chunks,
    ) {
        (false, false, _) | (false, true, 1..) => AttemptEnd::Host(HostError::Truncated),
        (_, _, 0) => AttemptEnd::EmptyStream,
        (true, _, _) => AttemptEnd::Completed,
    }
}
