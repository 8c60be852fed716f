//! Crowning by the liveness rule (docs/health.md §2): the first Healthy content is crowned at once;
//! content from a Suspect/Probation host is crowned as soon as no Healthy attempt is still running
//! without content, or `suspect_hold_ms` after it arrived. If any attempt produced content, the
//! client gets content.
//!
//! Losers: once a winner is crowned, every loser that has a receipt **drains** to its finish
//! marker (it reads its stream to the end and forwards nothing), as upstream lets losers finish:
//! its host already confirmed the start, so cancelling it would leave a nonce no finish ever
//! comes for, and about 20 minutes later the timeout vote would charge an honest host `missed`.
//! A drain is bounded by the stall timer and the attempt timeout. Suspect/Probation losers also
//! drain (their finish is the probation credit of docs/health.md §2). An attempt still without a
//! receipt is told it lost: it drains if its receipt comes within the receipt timeout (its host
//! may already hold the Start), else it ends cancelled (`attempt.rs`).

use std::time::Duration;

use actix::prelude::*;
use slog::info;
use tokio::sync::{mpsc, oneshot};

use super::{
    actor::{AttemptSlot, RaceActor},
    api::{RaceStart, CLIENT_CHANNEL_CAPACITY},
    messages::{Crown, FirstContent},
};
use crate::{
    policy::{
        health::Preference,
        hedge::{self, AttemptView, CrownDecision},
        settings::HealthSettings,
    },
    stats::timers,
};

impl Handler<FirstContent> for RaceActor {
    type Result = ResponseFuture<Crown>;

    fn handle(&mut self, msg: FirstContent, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        if self.winner.is_some() || self.reply.is_none() {
            let _ = tx.send(self.loser_crown(msg.idx));
        } else {
            let now = self.spec.clock.now_ms();
            if let Some(a) = self.attempts.get_mut(msg.idx) {
                a.first_content_ms.get_or_insert(now);
            }
            self.pending_crowns.insert(msg.idx, tx);
            self.decide_crown(ctx);
        }
        Box::pin(async move { rx.await.unwrap_or(Crown::Lose) })
    }
}

impl RaceActor {
    /// What a losing attempt does once there is a winner: one that has a receipt, or whose host
    /// is Suspect/Probation, drains to its end; any other one is cancelled.
    pub(super) fn loser_crown(&self, idx: usize) -> Crown {
        match self.attempts.get(idx) {
            Some(a) if self.winner.is_some() && loser_drains(a) => Crown::Drain,
            _ => Crown::Lose,
        }
    }

    /// Applies the liveness rule to the attempts that have content.
    pub(super) fn decide_crown(&mut self, ctx: &mut Context<Self>) {
        if self.winner.is_some() || self.pending_crowns.is_empty() {
            return;
        }
        let views: Vec<AttemptView> = self
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| AttemptView {
                preference: a.preference,
                // Only attempts waiting for the crown can be crowned.
                first_content_ms: a
                    .first_content_ms
                    .filter(|_| self.pending_crowns.contains_key(&i)),
                running: !a.ended,
            })
            .collect();
        let settings = HealthSettings {
            suspect_hold_ms: self.spec.limits.suspect_hold_ms,
            ..HealthSettings::default()
        };
        match hedge::choose_winner(&views, &settings, self.spec.clock.now_ms()) {
            CrownDecision::Crown { index } => self.crown(index),
            CrownDecision::HoldUntil { until_ms, .. } => {
                if let Some(t) = self.hold_timer.take() {
                    t.cancel(&self.stats, ctx);
                }
                let delay =
                    u64::try_from(until_ms.saturating_sub(self.spec.clock.now_ms())).unwrap_or(0);
                let delay = Duration::from_millis(delay);
                let timer = timers::run_later(&self.stats, ctx, "crown_hold", delay, |act, ctx| {
                    act.hold_timer = None;
                    act.decide_crown(ctx);
                });
                self.hold_timer = Some(timer);
            }
            CrownDecision::NoContent => {}
        }
    }

    fn crown(&mut self, idx: usize) {
        let Some(tx) = self.pending_crowns.remove(&idx) else {
            return;
        };
        let Some(reply) = self.reply.take() else {
            let _ = tx.send(Crown::Lose);
            return;
        };
        self.winner = Some(idx);
        if let Some(a) = self.attempts.get(idx) {
            let doubtful = a.preference != Preference::Healthy;
            info!(self.log, "winner selected"; "stage" => if doubtful { "suspect_winner_crowned" } else { "winner_selected" },
                "nonce" => a.nonce, "host" => a.host.short(), "kind" => a.kind);
            if doubtful {
                self.spec.metrics.suspect_winners.inc();
            }
        }
        for (i, other) in std::mem::take(&mut self.pending_crowns) {
            let _ = other.send(self.loser_crown(i));
        }
        // Losers without a receipt stop at once (they report `Cancelled`); the others drain.
        self.cancel_all(Some(idx));
        if self.spec.params.stream {
            let (stream_tx, stream_rx) = mpsc::channel(CLIENT_CHANNEL_CAPACITY);
            let crown = if reply.send(Ok(RaceStart::Stream(stream_rx))).is_ok() {
                Crown::StreamTo(stream_tx)
            } else {
                Crown::Lose
            };
            let _ = tx.send(crown);
        } else {
            self.reply = Some(reply);
            let _ = tx.send(Crown::Collect);
        }
    }
}

/// Whether a loser runs to its finish marker instead of being cancelled (see the module docs).
pub(super) fn loser_drains(a: &AttemptSlot) -> bool {
    a.receipt || a.preference != Preference::Healthy
}
