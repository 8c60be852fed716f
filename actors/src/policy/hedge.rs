//! Hedging decisions (docs/health.md §4): the hedge budget, when a hedge fires and where it goes, and
//! the liveness rule of §2 that decides when a Suspect/Probation attempt's content is crowned.
//!
//! Decisions the spec leaves open, made here:
//! - The budget bucket starts **full** (`hedge_burst`) and counts in micro-tokens (integers), so
//!   `hedges ≤ hedge_budget × requests + hedge_burst` holds exactly over any run (invariant 7).
//! - A late primary's remaining expected time is `max(expected_ttft − elapsed, elapsed)`: before
//!   its mean it needs the rest of its mean; once late, a heavy tail (Pareto α = 2) expects it to
//!   need about as long again as it has already taken. An Unresponsive primary's remaining time is
//!   unbounded. A hedge target must have `expected_first_token_ms` below that.
//! - A primary whose host must first be taught missed diffs (its grant carries catch-up chunks)
//!   is hedged at once, like an Unresponsive one, until its receipt: the host verifies every
//!   missed diff before it can answer, which its latency estimates (taken from caught-up
//!   requests) do not include — right after a fault clears that is seconds, and the first request
//!   after the clear would otherwise wait for it (chaos invariant 3, the 2 s recovery probe).
//! - Among qualifying targets: fewest skipped nonces, then better health preference, then the
//!   lowest expected first-token time. The next nonce's host is taken at once; a target that needs
//!   skipped nonces is taken only after `hedge_target_wait_ms` past the trigger (other queued
//!   requests get those nonces first), and only within `hedge_max_skip_nonces`.
//! - A hedge never exceeds `max_attempts` (Skip `MaxAttempts`); budget is checked before targets.

use serde::Serialize;

use super::{
    health::{is_routable, preference, HealthState, Preference},
    perf::{is_unresponsive, PerfEstimates},
    settings::HealthSettings,
};

const MICRO: u64 = 1_000_000;

fn micro(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        (v * MICRO as f64).floor() as u64
    } else {
        0
    }
}

/// Token bucket paying for hedges (failure-driven attempts are not hedges and cost nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HedgeBudget {
    /// Tokens × 10⁶.
    micro_tokens: u64,
    /// Requests seen (each added `hedge_budget` tokens).
    pub requests: u64,
    /// Hedges paid.
    pub hedges: u64,
}

impl HedgeBudget {
    /// A full bucket (`hedge_burst` tokens).
    pub fn new(settings: &HealthSettings) -> Self {
        HedgeBudget {
            micro_tokens: micro(settings.hedge_burst),
            requests: 0,
            hedges: 0,
        }
    }

    /// One more request: adds `hedge_budget` tokens, up to `hedge_burst`.
    pub fn on_request(&mut self, settings: &HealthSettings) {
        self.requests = self.requests.saturating_add(1);
        self.micro_tokens = self
            .micro_tokens
            .saturating_add(micro(settings.hedge_budget))
            .min(micro(settings.hedge_burst));
    }

    /// At least one whole token.
    pub fn available(&self) -> bool {
        self.micro_tokens >= MICRO
    }

    /// Pays for one hedge if a token is there.
    pub fn try_spend(&mut self) -> bool {
        if !self.available() {
            return false;
        }
        self.micro_tokens -= MICRO;
        self.hedges = self.hedges.saturating_add(1);
        true
    }

    /// Tokens left (for introspection).
    pub fn tokens(&self) -> f64 {
        self.micro_tokens as f64 / MICRO as f64
    }
}

/// What hedging knows about one host for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandidateView {
    /// Upcoming nonces a hedge to this host passes over (sent without inference); 0 = next nonce.
    pub skip_nonces: u32,
    pub expected_receipt_p95_ms: i64,
    pub expected_first_token_ms: i64,
    pub expected_first_token_p95_ms: i64,
    pub unresponsive: bool,
    pub preference: Preference,
    pub routable: bool,
    /// Already runs an attempt of this request (hedges go to distinct hosts).
    pub in_race: bool,
}

impl CandidateView {
    /// The view of a host from its estimates and health, for a prompt of `input_bytes`.
    pub fn new(
        perf: &PerfEstimates,
        health: &HealthState,
        settings: &HealthSettings,
        now_ms: i64,
        input_bytes: u64,
    ) -> Self {
        CandidateView {
            skip_nonces: 0,
            expected_receipt_p95_ms: perf.expected_receipt_p95_ms(settings, now_ms),
            expected_first_token_ms: perf.expected_first_token_ms(settings, now_ms, input_bytes),
            expected_first_token_p95_ms: perf.expected_first_token_p95_ms(
                settings,
                now_ms,
                input_bytes,
            ),
            unresponsive: is_unresponsive(perf, settings, now_ms),
            preference: preference(health),
            routable: is_routable(health, now_ms),
            in_race: false,
        }
    }
}

/// How far the primary attempt got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrimaryProgress {
    pub sent_ms: i64,
    pub got_receipt: bool,
    pub got_first_content: bool,
    /// Attempts this request has started so far (primary included).
    pub attempts: u32,
    /// The primary's host is being taught missed diffs before its inference (catch-up chunks).
    pub catching_up: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HedgeReason {
    ReceiptTimeout,
    FirstTokenTimeout,
    PrimaryUnresponsive,
    PrimaryCatchingUp,
}

/// `hedge_skipped reason=…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    Budget,
    NoFasterHost,
    MaxAttempts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HedgeDecision {
    /// The primary produced content: no hedge for this request.
    NotNeeded,
    /// Ask again at `until_ms` (or earlier if something changes).
    Wait { until_ms: i64 },
    /// Start a hedge on `candidates[target_index]`, passing over `skip_nonces` nonces.
    Hedge {
        target_index: usize,
        reason: HedgeReason,
        skip_nonces: u32,
    },
    /// The hedge that is due does not happen.
    Skip { reason: SkipReason },
}

/// When a hedge becomes due for this primary, and why (`None`: it has content).
pub fn hedge_trigger(
    primary: &CandidateView,
    progress: &PrimaryProgress,
    settings: &HealthSettings,
) -> Option<(i64, HedgeReason)> {
    if progress.got_first_content {
        return None;
    }
    if primary.unresponsive {
        return Some((progress.sent_ms, HedgeReason::PrimaryUnresponsive));
    }
    if progress.catching_up && !progress.got_receipt {
        return Some((progress.sent_ms, HedgeReason::PrimaryCatchingUp));
    }
    let ttft = primary
        .expected_first_token_p95_ms
        .max(settings.first_token_floor_ms);
    let ttft_due = (
        progress.sent_ms.saturating_add(ttft),
        HedgeReason::FirstTokenTimeout,
    );
    if progress.got_receipt {
        return Some(ttft_due);
    }
    let receipt = primary
        .expected_receipt_p95_ms
        .max(settings.receipt_timeout_floor_ms);
    let receipt_due = (
        progress.sent_ms.saturating_add(receipt),
        HedgeReason::ReceiptTimeout,
    );
    Some(if ttft_due.0 < receipt_due.0 {
        ttft_due
    } else {
        receipt_due
    })
}

/// Whether to hedge the primary now, later or not at all (see the module docs).
pub fn hedge_decision(
    primary: &CandidateView,
    progress: &PrimaryProgress,
    candidates: &[CandidateView],
    budget_available: bool,
    settings: &HealthSettings,
    now_ms: i64,
) -> HedgeDecision {
    let Some((due_ms, reason)) = hedge_trigger(primary, progress, settings) else {
        return HedgeDecision::NotNeeded;
    };
    if now_ms < due_ms {
        return HedgeDecision::Wait { until_ms: due_ms };
    }
    if progress.attempts >= settings.max_attempts {
        return HedgeDecision::Skip {
            reason: SkipReason::MaxAttempts,
        };
    }
    if !budget_available {
        return HedgeDecision::Skip {
            reason: SkipReason::Budget,
        };
    }
    let elapsed = now_ms.saturating_sub(progress.sent_ms).max(0);
    let remaining = if primary.unresponsive || reason == HedgeReason::PrimaryCatchingUp {
        i64::MAX
    } else {
        primary
            .expected_first_token_ms
            .saturating_sub(elapsed)
            .max(elapsed)
    };
    let best = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.routable
                && !c.in_race
                && c.preference != Preference::Ejected
                && c.skip_nonces <= settings.hedge_max_skip_nonces
                && c.expected_first_token_ms < remaining
        })
        .min_by_key(|(i, c)| (c.skip_nonces, c.preference, c.expected_first_token_ms, *i));
    let wait_until = due_ms.saturating_add(settings.hedge_target_wait_ms.max(0));
    match best {
        Some((target_index, c)) if c.skip_nonces == 0 || now_ms >= wait_until => {
            HedgeDecision::Hedge {
                target_index,
                reason,
                skip_nonces: c.skip_nonces,
            }
        }
        _ if now_ms < wait_until => HedgeDecision::Wait {
            until_ms: wait_until,
        },
        _ => HedgeDecision::Skip {
            reason: SkipReason::NoFasterHost,
        },
    }
}

/// One attempt of a race, as the liveness rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptView {
    pub preference: Preference,
    /// When it produced its first content, if it has.
    pub first_content_ms: Option<i64>,
    /// Still streaming or waiting.
    pub running: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrownDecision {
    /// No attempt has content yet.
    NoContent,
    Crown {
        index: usize,
    },
    /// Crown `index` at `until_ms` unless a Healthy attempt produces content first.
    HoldUntil {
        index: usize,
        until_ms: i64,
    },
}

/// The liveness rule (docs/health.md §2): the earliest Healthy content is crowned at once; otherwise
/// the best doubtful content is crowned as soon as no Healthy attempt is still running without
/// content, or `suspect_hold_ms` after it produced content. Content is never withheld for longer.
pub fn choose_winner(
    attempts: &[AttemptView],
    settings: &HealthSettings,
    now_ms: i64,
) -> CrownDecision {
    let with_content = attempts
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.first_content_ms.map(|t| (a.preference, t, i)));
    let Some((pref, at_ms, index)) = with_content.min() else {
        return CrownDecision::NoContent;
    };
    if pref == Preference::Healthy {
        return CrownDecision::Crown { index };
    }
    let healthy_waiting = attempts
        .iter()
        .any(|a| a.preference == Preference::Healthy && a.running && a.first_content_ms.is_none());
    let until_ms = at_ms.saturating_add(settings.suspect_hold_ms.max(0));
    if !healthy_waiting || now_ms >= until_ms {
        CrownDecision::Crown { index }
    } else {
        CrownDecision::HoldUntil { index, until_ms }
    }
}
