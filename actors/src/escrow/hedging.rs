//! Hedges and probation pairs (HEALTH.md §4, §2): extra attempts that do not wait in the picker's
//! queue. A hedge is paid from the token bucket and goes only to a host expected to be faster
//! than what is left of the primary, passing over at most `hedge_max_skip_nonces` upcoming nonces
//! (sent as diffs without inference); a pair goes to the next Healthy host within the same bound.

use actix::prelude::*;
use slog::info;

use super::{
    actor::{EscrowActor, Waiter},
    error::EscrowError,
    messages::HedgeRequest,
};
use crate::{
    policy::{
        health::{HealthState, Preference},
        hedge::{self, CandidateView, HedgeDecision, PrimaryProgress},
        perf::PerfEstimates,
    },
    protocol::crypto::Address,
};

impl EscrowActor {
    fn candidate(&self, host: &Address, input_bytes: u64) -> CandidateView {
        let now = self.now_ms();
        let (health, perf) = self
            .hosts_health
            .get(host)
            .map_or((HealthState::default(), PerfEstimates::default()), |h| {
                (h.health.clone(), h.perf.clone())
            });
        CandidateView::new(&perf, &health, &self.settings, now, input_bytes)
    }

    /// When a hedge becomes due for a primary sent now to `host`.
    pub(super) fn hedge_due(&self, host: &Address, input_bytes: u64, sent_ms: i64) -> Option<i64> {
        let primary = self.candidate(host, input_bytes);
        let progress = PrimaryProgress {
            sent_ms,
            got_receipt: false,
            got_first_content: false,
            attempts: 1,
        };
        hedge::hedge_trigger(&primary, &progress, &self.settings).map(|(due, _)| due)
    }

    /// Upcoming nonces' hosts as hedge candidates (`skip_nonces` = position).
    fn upcoming(&self, exclude: &[Address], input_bytes: u64) -> Vec<(u64, CandidateView)> {
        let next = self.session.nonce().saturating_add(1);
        let max_skip = u64::from(self.settings.hedge_max_skip_nonces);
        (0..=max_skip)
            .filter_map(|k| {
                let nonce = next.saturating_add(k);
                let host = self.session.info().host_for_nonce(nonce)?.address.clone();
                let mut c = self.candidate(&host, input_bytes);
                c.skip_nonces = u32::try_from(k).unwrap_or(u32::MAX);
                c.in_race = exclude.contains(&host);
                c.routable = c.routable && !self.withheld.contains(&host);
                Some((nonce, c))
            })
            .collect()
    }

    /// Decides a hedge and, when it goes ahead, grants it at once.
    pub(super) fn hedge(&mut self, w: Waiter, req: HedgeRequest, ctx: &mut Context<Self>) {
        let input = u64::try_from(w.params.body.len()).unwrap_or(u64::MAX);
        let primary = self.candidate(&req.primary, input);
        let progress = PrimaryProgress {
            sent_ms: req.sent_ms,
            got_receipt: req.got_receipt,
            got_first_content: req.got_first_content,
            attempts: req.attempts,
        };
        let upcoming = self.upcoming(&w.exclude, input);
        let views: Vec<CandidateView> = upcoming.iter().map(|(_, c)| *c).collect();
        let decision = hedge::hedge_decision(
            &primary,
            &progress,
            &views,
            self.budget.available(),
            &self.settings,
            self.now_ms(),
        );
        match decision {
            HedgeDecision::Hedge {
                target_index,
                reason,
                skip_nonces,
            } => {
                if !self.budget.try_spend() {
                    self.skip_hedge(w, "budget");
                    return;
                }
                self.metrics.hedge_tokens.set(self.budget.tokens());
                let reason = format!("{reason:?}").to_lowercase();
                self.metrics.hedges.with_label_values(&[&reason]).inc();
                let target = upcoming
                    .get(target_index)
                    .map(|(n, _)| *n)
                    .unwrap_or_default();
                info!(self.log, "hedge started"; "stage" => "hedge_started", "reason" => &reason,
                    "primary" => req.primary.short(), "nonce" => target, "skipped_nonces" => skip_nonces,
                    "request" => &w.params.request_id);
                self.skip_then_grant(w, skip_nonces, ctx);
            }
            HedgeDecision::Skip { reason } => {
                let reason = format!("{reason:?}").to_lowercase();
                self.skip_hedge(w, &reason);
            }
            HedgeDecision::Wait { until_ms } => {
                let _ = w.reply.send(Err(EscrowError::HedgeWait(until_ms)));
            }
            HedgeDecision::NotNeeded => {
                let _ = w
                    .reply
                    .send(Err(EscrowError::HedgeSkipped("not_needed".into())));
            }
        }
    }

    fn skip_hedge(&mut self, w: Waiter, reason: &str) {
        self.metrics
            .hedges_skipped
            .with_label_values(&[reason])
            .inc();
        info!(self.log, "hedge skipped"; "stage" => "hedge_skipped", "reason" => reason,
            "request" => &w.params.request_id);
        let _ = w
            .reply
            .send(Err(EscrowError::HedgeSkipped(reason.to_string())));
    }

    /// A probation pair: the next Healthy host not yet in the race, within the skip bound.
    pub(super) fn pair(&mut self, w: Waiter, ctx: &mut Context<Self>) {
        let input = u64::try_from(w.params.body.len()).unwrap_or(u64::MAX);
        let upcoming = self.upcoming(&w.exclude, input);
        let skip = upcoming
            .iter()
            .find(|(_, c)| c.routable && !c.in_race && c.preference == Preference::Healthy)
            .map(|(_, c)| c.skip_nonces);
        match skip {
            Some(k) => {
                info!(self.log, "probation attempt paired with a healthy host"; "stage" => "probation_paired",
                    "request" => &w.params.request_id, "skipped_nonces" => k);
                self.skip_then_grant(w, k, ctx);
            }
            None => {
                let _ = w
                    .reply
                    .send(Err(EscrowError::HedgeSkipped("no_healthy_host".into())));
            }
        }
    }

    /// Passes over `skip` nonces (diffs without inference) and grants the next one.
    fn skip_then_grant(&mut self, w: Waiter, skip: u32, ctx: &mut Context<Self>) {
        for _ in 0..skip {
            match self.compose_withheld(crate::policy::reason::EmptyDiffReason::HedgeSkip) {
                Some((diff, ack)) => self.watch_ack(diff.nonce, ack, ctx),
                None => break,
            }
        }
        self.grant(w, ctx);
    }

    /// Whether any routable participant is Healthy.
    pub(super) fn healthy_available(&self) -> bool {
        self.session.info().hosts.iter().any(|h| {
            !self.withheld.contains(&h.address)
                && self.preference(&h.address) == Preference::Healthy
        })
    }
}
