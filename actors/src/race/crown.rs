//! Crowning by the liveness rule (docs/health.md §2): the first Healthy content is crowned at once;
//! content from a Suspect/Probation host is crowned as soon as no Healthy attempt is still running
//! without content, or `suspect_hold_ms` after it arrived. If any attempt produced content, the
//! client gets content.

use std::time::Duration;

use actix::prelude::*;
use slog::info;
use tokio::sync::{mpsc, oneshot};

use super::{
    actor::RaceActor,
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
    /// What a losing attempt does: a Suspect/Probation host's attempt drains to its end (its
    /// finish is the probation credit docs/health.md §2 asks for); a Healthy one is cancelled.
    pub(super) fn loser_crown(&self, idx: usize) -> Crown {
        let doubtful = self
            .attempts
            .get(idx)
            .is_some_and(|a| a.preference != Preference::Healthy);
        if doubtful && self.winner.is_some() {
            Crown::Drain
        } else {
            Crown::Lose
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
        // Losers stop at once; they report `Cancelled`.
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
