//! The `RaceActor`'s handlers (attempt progress and ends, debug view) and its [`RaceReport`]:
//! every nonce the race was granted and every attempt with its role, host, timing and result.

use actix::prelude::*;
use slog::info;

use super::{
    actor::{AttemptSlot, RaceActor},
    api::{AttemptRecord, RaceReport, RaceStart},
    errors::end_error,
    messages::{AttemptFinished, Crown, Delivered, RaceView, ReceiptSeen},
};
use crate::{
    escrow::messages::AttemptKind,
    host::HostError,
    outcome::AttemptEnd,
    stats::{tracked_actor, Describe},
};

tracked_actor!(RaceActor);

impl Handler<ReceiptSeen> for RaceActor {
    type Result = ();

    fn handle(&mut self, msg: ReceiptSeen, ctx: &mut Self::Context) {
        if let Some(a) = self.attempts.get_mut(msg.idx) {
            a.receipt = true;
        }
        // The primary's hedge is now due on its first-token estimate: ask again.
        if msg.idx == 0 && self.hedge_timer.is_some() && self.winner.is_none() {
            let now = self.now();
            self.arm_hedge(now, ctx);
        }
    }
}

impl Handler<Delivered> for RaceActor {
    type Result = ();

    fn handle(&mut self, msg: Delivered, _: &mut Self::Context) {
        if self.winner == Some(msg.idx) {
            if let Some(reply) = self.reply.take() {
                let _ = reply.send(Ok(RaceStart::Whole(msg.body)));
            }
        }
    }
}

impl Handler<AttemptFinished> for RaceActor {
    type Result = ();

    fn handle(&mut self, msg: AttemptFinished, ctx: &mut Self::Context) {
        let now = self.now();
        let lost = self.winner.is_some_and(|w| w != msg.idx);
        if let Some(a) = self.attempts.get_mut(msg.idx) {
            a.ended = true;
            a.end = Some((msg.end.clone(), now));
            if lost && msg.end == AttemptEnd::Completed {
                let why = if a.receipt { "receipt" } else { "doubtful" };
                self.spec
                    .metrics
                    .losers_drained
                    .with_label_values(&[why])
                    .inc();
            }
        }
        if let Some(tx) = self.pending_crowns.remove(&msg.idx) {
            let _ = tx.send(Crown::Lose);
        }
        if msg.crowned || self.winner.is_some() {
            if msg.crowned && self.reply.is_some() {
                // A non-streaming winner ended without delivering: fall through to an error.
                self.last_error = Some(end_error(&msg.end, None));
            }
            self.maybe_finish(ctx);
            return;
        }
        // A Healthy attempt ended: a held doubtful content may be crowned now.
        self.decide_crown(ctx);
        let shared = msg
            .verdict
            .shared_fault
            .clone()
            .zip(msg.verdict.shared_class);
        self.last_error = Some(end_error(&msg.end, shared.clone()));
        if msg.verdict.host_paused && !self.came_back.contains(&msg.host) {
            // The host announced a pause before any work (503, 429): it has not failed this
            // request, so a retry may come back to it, once, when its probe is due.
            // Run J (seed `long-1`, 1 164 s): every waiting race had excluded the one host that
            // held the state after its 503s, the others were catching up, and nothing took that
            // host when it answered again until the catch-ups were over (3 s; invariant 3).
            self.tried.retain(|h| *h != msg.host);
            self.came_back.push(msg.host.clone());
        }
        let client_waiting = self.reply.as_ref().is_some_and(|r| !r.is_closed());
        let others_running = self.running() > 0;
        if shared.is_some() {
            self.cancel_all(None);
        } else if client_waiting && msg.verdict.retry && !others_running && self.winner.is_none() {
            info!(self.log, "attempt failed; trying the next host"; "stage" => "attempt_retry",
                "host" => msg.host.short());
            self.request_attempt(AttemptKind::Retry, ctx);
        }
        self.maybe_finish(ctx);
    }
}

impl Handler<Describe> for RaceActor {
    type Result = MessageResult<Describe>;

    fn handle(&mut self, _: Describe, _: &mut Self::Context) -> Self::Result {
        let report = self.report();
        let view = RaceView {
            race_id: self.spec.race_id,
            escrow_id: self.spec.escrow_id.clone(),
            request_id: self.spec.params.request_id.clone(),
            started_at: self.started_ms,
            shape: self.shape,
            hedge_armed: self.hedge_timer.is_some(),
            attempts: report.attempts,
            winner: self.winner,
            awaiting_crown: self.pending_crowns.keys().copied().collect(),
        };
        MessageResult(serde_json::to_value(view).unwrap_or_default())
    }
}

/// The failure kind of an attempt's end (`None` for the non-failures).
fn failure_kind(end: &AttemptEnd) -> Option<String> {
    Some(match end {
        AttemptEnd::Completed | AttemptEnd::Cancelled | AttemptEnd::ClientGone => return None,
        AttemptEnd::Host(HostError::Connect(_)) => "connect".into(),
        AttemptEnd::Host(HostError::Tls(_)) => "tls".into(),
        AttemptEnd::Host(HostError::Transport(_)) => "transport".into(),
        AttemptEnd::Host(HostError::Timeout(_)) => "timeout".into(),
        AttemptEnd::Host(HostError::Status { status, .. }) => format!("status_{status}"),
        AttemptEnd::Host(HostError::Truncated) => "truncated".into(),
        AttemptEnd::Host(HostError::Decode(_)) => "decode".into(),
        AttemptEnd::EmptyStream => "empty_stream".into(),
        AttemptEnd::ErrorEvent { .. } => "error_event".into(),
        AttemptEnd::Stalled => "stalled".into(),
        AttemptEnd::ReceiptRejected(_) => "receipt_rejected".into(),
        AttemptEnd::EscrowGone => "escrow_gone".into(),
    })
}

/// A human-readable reason of a failed end.
fn failure_message(end: &AttemptEnd) -> String {
    match end {
        AttemptEnd::Host(e) => e.to_string(),
        AttemptEnd::ErrorEvent { message, .. } => message.clone(),
        AttemptEnd::ReceiptRejected(e) => e.to_string(),
        AttemptEnd::EmptyStream => "receipt and [DONE] without content".into(),
        AttemptEnd::Stalled => "no progress within the stall limit".into(),
        other => format!("{other:?}"),
    }
}

impl RaceActor {
    fn attempt_record(&self, idx: usize, a: &AttemptSlot) -> AttemptRecord {
        let won = self.winner == Some(idx);
        let (result, error, detail) = match &a.end {
            None => ("running", None, None),
            Some((end, _)) => match (end, failure_kind(end)) {
                (AttemptEnd::Completed, _) if won => ("won", None, None),
                // A loser that ran to its end (it had a receipt, or its host was doubtful).
                (AttemptEnd::Completed, _) => ("drained", None, None),
                (AttemptEnd::Cancelled, _) => ("cancelled", None, None),
                (AttemptEnd::ClientGone, _) => ("client_gone", None, None),
                (_, kind) if won => ("won_then_failed", kind, Some(failure_message(end))),
                (_, kind) => ("failed", kind, Some(failure_message(end))),
            },
        };
        AttemptRecord {
            nonce: a.nonce,
            host: a.host.to_string(),
            role: a.kind,
            preference: format!("{:?}", a.preference).to_lowercase(),
            start_offset_ms: Some(a.sent_ms.saturating_sub(self.started_ms)),
            duration_ms: a.end.as_ref().map(|(_, at)| at.saturating_sub(a.sent_ms)),
            first_content_ms: a.first_content_ms.map(|t| t.saturating_sub(a.sent_ms)),
            result,
            error,
            detail,
        }
    }

    /// Every nonce granted to this race and every attempt (see the module docs).
    pub(super) fn report(&self) -> RaceReport {
        let mut attempts: Vec<AttemptRecord> = self
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| self.attempt_record(i, a))
            .collect();
        attempts.extend(self.unused.iter().map(|u| AttemptRecord {
            nonce: u.nonce,
            host: u.host.to_string(),
            role: u.kind,
            preference: String::new(),
            start_offset_ms: None,
            duration_ms: None,
            first_content_ms: None,
            result: "not_started",
            error: None,
            detail: None,
        }));
        let mut nonces: Vec<u64> = attempts.iter().map(|a| a.nonce).collect();
        nonces.sort_unstable();
        RaceReport {
            race_id: self.spec.race_id,
            nonces,
            attempts,
            winner: self.winner,
        }
    }
}
