//! Hedges and probation pairs (docs/health.md §4, §2), decided over the escrow's host routing: extra
//! attempts that do not wait in the picker's queue. A hedge is paid from the token bucket and
//! goes only to a host expected to be faster than what is left of the primary, passing over at
//! most `hedge_max_skip_nonces` upcoming nonces (sent as diffs without inference); a pair goes to
//! the next Healthy host within the same bound.
//!
//! Each decision either answers the race at once or returns how many nonces to pass over before
//! the grant (the actor composes those and grants through `durable.rs`).

use slog::info;

use super::{
    error::EscrowError, messages::HedgeRequest, picker::Waiter, reach::Reachability,
    routing::Routing, session::Session, EscrowDeps,
};
use crate::{
    policy::{
        health::Preference,
        hedge::{self, CandidateView, HedgeDecision, PrimaryProgress},
        settings::HealthSettings,
    },
    protocol::crypto::Address,
};

/// A waiter to grant after passing over `skip` nonces.
pub(super) type SkipThenGrant = (Waiter, u32);

fn candidate(
    routing: &Routing,
    settings: &HealthSettings,
    host: &Address,
    input_bytes: u64,
    now: i64,
) -> CandidateView {
    let (health, perf) = routing.health_of(host);
    CandidateView::new(&perf, &health, settings, now, input_bytes)
}

/// When a hedge becomes due for a primary sent now to `host` (`catching_up`: its grant carries
/// catch-up chunks).
pub(super) fn hedge_due(
    routing: &Routing,
    settings: &HealthSettings,
    (host, catching_up): (&Address, bool),
    input_bytes: u64,
    now: i64,
) -> Option<i64> {
    let primary = candidate(routing, settings, host, input_bytes, now);
    let progress = PrimaryProgress {
        sent_ms: now,
        got_receipt: false,
        got_first_content: false,
        attempts: 1,
        catching_up,
    };
    hedge::hedge_trigger(&primary, &progress, settings).map(|(due, _)| due)
}

/// Upcoming nonces' hosts as hedge candidates (`skip_nonces` = position); a host that refuses
/// connections is none (`reach/mod.rs`).
fn upcoming(
    (routing, reach): (&Routing, &Reachability),
    session: &Session,
    settings: &HealthSettings,
    w: &Waiter,
    input_bytes: u64,
    now: i64,
) -> Vec<(u64, CandidateView)> {
    let next = session.nonce().saturating_add(1);
    let max_skip = u64::from(settings.hedge_max_skip_nonces);
    (0..=max_skip)
        .filter_map(|k| {
            let nonce = next.saturating_add(k);
            let host = session.info().host_for_nonce(nonce)?.address.clone();
            let mut c = candidate(routing, settings, &host, input_bytes, now);
            c.skip_nonces = u32::try_from(k).unwrap_or(u32::MAX);
            c.in_race = w.exclude.contains(&host);
            // Relaxed PoC: a host the request may not use is no candidate.
            c.routable = c.routable
                && !routing.is_withheld(&host)
                && !reach.is_unreachable(&host)
                && w.params.allows(&host);
            Some((nonce, c))
        })
        .collect()
}

/// Decides a hedge: the waiter to grant (after skipping nonces), or `None` when the race was
/// answered (skipped, wait, not needed).
pub(super) fn hedge(
    (routing, reach): (&mut Routing, &Reachability),
    session: &Session,
    deps: &EscrowDeps,
    now: i64,
    w: Waiter,
    req: HedgeRequest,
) -> Option<SkipThenGrant> {
    let settings = &deps.settings;
    let input = u64::try_from(w.params.body.len()).unwrap_or(u64::MAX);
    let primary = candidate(routing, settings, &req.primary, input, now);
    let progress = PrimaryProgress {
        sent_ms: req.sent_ms,
        got_receipt: req.got_receipt,
        got_first_content: req.got_first_content,
        attempts: req.attempts,
        catching_up: req.catching_up,
    };
    let upcoming = upcoming((routing, reach), session, settings, &w, input, now);
    let views: Vec<CandidateView> = upcoming.iter().map(|(_, c)| *c).collect();
    let decision = hedge::hedge_decision(
        &primary,
        &progress,
        &views,
        routing.hedge_budget_available(),
        settings,
        now,
    );
    match decision {
        HedgeDecision::Hedge {
            target_index,
            reason,
            skip_nonces,
        } => {
            if !routing.spend_hedge_token() {
                skip_hedge(deps, w, "budget");
                return None;
            }
            let reason = format!("{reason:?}").to_lowercase();
            deps.metrics.hedges.with_label_values(&[&reason]).inc();
            let target = upcoming
                .get(target_index)
                .map(|(n, _)| *n)
                .unwrap_or_default();
            info!(deps.log, "hedge started"; "stage" => "hedge_started", "reason" => &reason,
                "primary" => req.primary.short(), "nonce" => target, "skipped_nonces" => skip_nonces,
                "request" => &w.params.request_id);
            Some((w, skip_nonces))
        }
        HedgeDecision::Skip { reason } => {
            let reason = format!("{reason:?}").to_lowercase();
            skip_hedge(deps, w, &reason);
            None
        }
        HedgeDecision::Wait { until_ms } => {
            let _ = w.reply.send(Err(EscrowError::HedgeWait(until_ms)));
            None
        }
        HedgeDecision::NotNeeded => {
            let _ = w
                .reply
                .send(Err(EscrowError::HedgeSkipped("not_needed".into())));
            None
        }
    }
}

fn skip_hedge(deps: &EscrowDeps, w: Waiter, reason: &str) {
    deps.metrics
        .hedges_skipped
        .with_label_values(&[reason])
        .inc();
    info!(deps.log, "hedge skipped"; "stage" => "hedge_skipped", "reason" => reason,
        "request" => &w.params.request_id);
    let _ = w
        .reply
        .send(Err(EscrowError::HedgeSkipped(reason.to_string())));
}

/// A probation pair: the next Healthy host not yet in the race, within the skip bound.
pub(super) fn pair(
    routing: (&Routing, &Reachability),
    session: &Session,
    deps: &EscrowDeps,
    now: i64,
    w: Waiter,
) -> Option<SkipThenGrant> {
    let input = u64::try_from(w.params.body.len()).unwrap_or(u64::MAX);
    let upcoming = upcoming(routing, session, &deps.settings, &w, input, now);
    let skip = upcoming
        .iter()
        .find(|(_, c)| c.routable && !c.in_race && c.preference == Preference::Healthy)
        .map(|(_, c)| c.skip_nonces);
    match skip {
        Some(k) => {
            info!(deps.log, "probation attempt paired with a healthy host"; "stage" => "probation_paired",
                "request" => &w.params.request_id, "skipped_nonces" => k);
            Some((w, k))
        }
        None => {
            let _ = w
                .reply
                .send(Err(EscrowError::HedgeSkipped("no_healthy_host".into())));
            None
        }
    }
}
