//! The participant health state machine of HEALTH.md §2, as pure transitions over a persisted
//! [`HealthState`]. Time is always an argument; jitter is an explicit draw in `[-1, 1]`.
//!
//! ```text
//! Healthy ──strike──▶ Suspect ──strikes ≥ eject_strikes──▶ Ejected(until, level)
//!    ▲                   │ decay                               │ until passes
//!    │                   ▼                                     ▼
//!    └──────────── Healthy ◀── probation_successes ── Probation(probes left)
//! ```
//!
//! Decisions the spec leaves open, made here:
//! - Strikes are one decayed accumulator (`strikes` as of `strikes_at_ms`), not a list: the
//!   decayed weight `strikes · 2^(−age / strike_half_life_ms)` falls monotonically with age.
//! - Decayed weights are compared with whole-number thresholds **rounded to the nearest whole
//!   number** ([`reaches`]: `decayed ≥ threshold − 0.5`), because strikes taken at different
//!   times never sum to exactly 3.0: three strikes up to ~33 s apart eject (default half-life),
//!   a host failing steadily more often than every ~88 s is ejected eventually, rarer failures
//!   never accumulate, and one strike on a clean host never ejects.
//! - Suspect clears when the rounded weight is 0 (decayed < [`SUSPECT_CLEAR_STRIKES`], 0.5): a
//!   single strike keeps a host Suspect for one half-life (2 min) instead of a millisecond.
//! - A host fault during Probation re-ejects at once (the half-open breaker of Finagle/Linkerd),
//!   subject to the floor and relative evidence like every ejection.
//! - Every ejection (byzantine and stalled-winner included) passes the floor and the relative
//!   evidence check, and never leaves an escrow with zero routable participants (a hard floor on
//!   top of `min_routable_fraction`), so ejections alone never blank an escrow (invariant 3).
//! - The level used for an ejection is the level before it; the level then rises by one. It falls
//!   by one per `level_decay_ms` spent Healthy (Suspect, Ejected and Probation do not count; the
//!   healthy stretch restarts whenever the host becomes Healthy).
//! - Leaving probation (by successes or by time) clears the strikes: the host is Healthy again and
//!   only its level remembers the offence.
//! - `tick` replays missed deadlines at their own times, so ticking late or often gives the same
//!   state (`tick(tick(s, t1), t2) == tick(s, t2)`).

mod inputs;

use serde::{Deserialize, Serialize};

pub use self::inputs::{
    ejection_allowed, panic_order, Charge, EjectionContext, EscrowView, OutcomeFacts,
    SuppressReason,
};
use super::settings::HealthSettings;

/// Decayed strike weight below which a Suspect host is Healthy again.
pub const SUSPECT_CLEAR_STRIKES: f64 = 0.5;
/// Doubling stops here (30 s × 2^40 is far beyond any cap).
const MAX_LEVEL_EXPONENT: u32 = 40;
/// Deadline replays per `tick` (each step consumes one deadline; four kinds exist).
const MAX_TICK_STEPS: usize = 8;

/// Where a participant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HealthStatus {
    #[default]
    Healthy,
    Suspect,
    /// Not routable before `until_ms`; `level` is the level the duration was computed with.
    Ejected {
        until_ms: i64,
        level: u32,
    },
    /// Routable but doubtful; `remaining` finished attempts (or `probation_max_ms`) to Healthy.
    Probation {
        remaining: u32,
        since_ms: i64,
    },
}

impl HealthStatus {
    /// `healthy`, `suspect`, `ejected` or `probation` (admin listing).
    pub fn label(&self) -> &'static str {
        match self {
            HealthStatus::Healthy => "healthy",
            HealthStatus::Suspect => "suspect",
            HealthStatus::Ejected { .. } => "ejected",
            HealthStatus::Probation { .. } => "probation",
        }
    }
}

/// The persisted health of one participant (process-wide).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthState {
    pub state: HealthStatus,
    /// Strike weight as of `strikes_at_ms` (decays from there).
    pub strikes: f64,
    pub strikes_at_ms: i64,
    /// Repeat-offence level: the next ejection lasts `base_ejection_ms × 2^level`.
    pub level: u32,
    /// Start of the current healthy stretch (or the last level decrement).
    pub level_since_ms: i64,
    /// Ejections so far.
    pub ejections: u64,
}

/// Routing preference: Healthy first, then Suspect/Probation; Ejected hosts only in panic mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preference {
    Healthy,
    /// Suspect or on probation.
    Doubtful,
    Ejected,
}

/// Transitions, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum HealthEffect {
    Ejected { until_ms: i64, level: u32 },
    ProbationStarted,
    BecameHealthy,
    BecameSuspect,
    EjectionSuppressed { reason: SuppressReason },
    LevelLowered { level: u32 },
}

/// Whether a decayed count reaches a whole-number threshold: the count rounded to the nearest
/// whole number is at least `threshold` (`decayed ≥ threshold − 0.5`). Shared with perf.
pub fn reaches(decayed: f64, threshold: f64) -> bool {
    decayed >= threshold - 0.5
}

/// Strike weight at `now_ms` (age below zero counts as zero).
pub fn decayed_strikes(state: &HealthState, settings: &HealthSettings, now_ms: i64) -> f64 {
    decay(
        state.strikes,
        state.strikes_at_ms,
        now_ms,
        settings.strike_half_life_ms,
    )
}

/// `value · 2^(−(now − at) / half_life)`; never grows, never negative.
pub(crate) fn decay(value: f64, at_ms: i64, now_ms: i64, half_life_ms: i64) -> f64 {
    let age = now_ms.saturating_sub(at_ms).max(0) as f64;
    let half = half_life_ms.max(1) as f64;
    (value * (-age / half).exp2()).max(0.0)
}

/// Routable now: anything but an ejection whose deadline has not passed.
pub fn is_routable(state: &HealthState, now_ms: i64) -> bool {
    !matches!(state.state, HealthStatus::Ejected { until_ms, .. } if now_ms < until_ms)
}

/// Healthy first, then Suspect/Probation, then Ejected.
pub fn preference(state: &HealthState) -> Preference {
    match state.state {
        HealthStatus::Healthy => Preference::Healthy,
        HealthStatus::Suspect | HealthStatus::Probation { .. } => Preference::Doubtful,
        HealthStatus::Ejected { .. } => Preference::Ejected,
    }
}

/// `base_ejection_ms × 2^level`, capped at `max_ejection_ms`, then `± ejection_jitter` by `draw`.
pub fn ejection_duration_ms(level: u32, settings: &HealthSettings, jitter_draw: f64) -> i64 {
    let base = settings.base_ejection_ms.max(1);
    let raw = base.saturating_mul(1i64 << level.min(MAX_LEVEL_EXPONENT));
    let capped = raw.min(settings.max_ejection_ms.max(base));
    let draw = if jitter_draw.is_finite() {
        jitter_draw.clamp(-1.0, 1.0)
    } else {
        0.0
    };
    let jitter = if settings.ejection_jitter.is_finite() {
        settings.ejection_jitter.clamp(0.0, 0.99)
    } else {
        0.0
    };
    ((capped as f64 * (1.0 + jitter * draw)).round() as i64).max(1)
}

/// Applies one final outcome at `now_ms` (after replaying due deadlines).
pub fn on_outcome(
    state: &HealthState,
    facts: &OutcomeFacts,
    ctx: &EjectionContext,
    settings: &HealthSettings,
    now_ms: i64,
    jitter_draw: f64,
) -> (HealthState, Vec<HealthEffect>) {
    let (mut s, mut effects) = tick(state, settings, now_ms);
    let charge = facts.charge();
    match charge {
        Charge::Nothing => {}
        Charge::Credit => {
            if let HealthStatus::Probation {
                remaining,
                since_ms,
            } = s.state
            {
                let remaining = remaining.saturating_sub(1);
                if remaining == 0 {
                    end_probation(&mut s, now_ms);
                    effects.push(HealthEffect::BecameHealthy);
                } else {
                    s.state = HealthStatus::Probation {
                        remaining,
                        since_ms,
                    };
                }
            }
        }
        Charge::Strike | Charge::EjectNow => {
            s.strikes = decayed_strikes(&s, settings, now_ms) + 1.0;
            s.strikes_at_ms = s.strikes_at_ms.max(now_ms);
            let eject = match s.state {
                HealthStatus::Healthy => {
                    s.state = HealthStatus::Suspect;
                    effects.push(HealthEffect::BecameSuspect);
                    charge == Charge::EjectNow || reaches(s.strikes, settings.eject_strikes)
                }
                HealthStatus::Suspect => {
                    charge == Charge::EjectNow || reaches(s.strikes, settings.eject_strikes)
                }
                HealthStatus::Probation { .. } => true,
                HealthStatus::Ejected { .. } => charge == Charge::EjectNow,
            };
            if eject {
                let routable = is_routable(&s, now_ms);
                match ejection_allowed(ctx, settings, routable) {
                    Ok(()) => effects.push(eject_now(&mut s, settings, now_ms, jitter_draw)),
                    Err(reason) => effects.push(HealthEffect::EjectionSuppressed { reason }),
                }
            }
        }
    }
    (s, effects)
}

/// Ejects (or extends a running ejection; a deadline is never shortened).
fn eject_now(
    s: &mut HealthState,
    settings: &HealthSettings,
    now_ms: i64,
    draw: f64,
) -> HealthEffect {
    let level = s.level;
    let until = now_ms.saturating_add(ejection_duration_ms(level, settings, draw));
    let until_ms = match s.state {
        HealthStatus::Ejected { until_ms: old, .. } => until.max(old),
        _ => {
            s.level = s.level.saturating_add(1);
            s.ejections = s.ejections.saturating_add(1);
            until
        }
    };
    s.state = HealthStatus::Ejected { until_ms, level };
    HealthEffect::Ejected { until_ms, level }
}

fn end_probation(s: &mut HealthState, at_ms: i64) {
    s.state = HealthStatus::Healthy;
    s.strikes = 0.0;
    s.strikes_at_ms = at_ms;
    s.level_since_ms = at_ms;
}

/// When a Suspect host's decayed strikes fall below [`SUSPECT_CLEAR_STRIKES`].
fn suspect_clears_at(s: &HealthState, settings: &HealthSettings) -> i64 {
    if s.strikes.is_nan() || s.strikes < SUSPECT_CLEAR_STRIKES {
        return s.strikes_at_ms;
    }
    let half = settings.strike_half_life_ms.max(1) as f64;
    let after = (half * (s.strikes / SUSPECT_CLEAR_STRIKES).log2()).ceil();
    s.strikes_at_ms.saturating_add(after as i64)
}

/// When `tick` must run next (the earliest deadline of the current state), if ever.
pub fn next_deadline(state: &HealthState, settings: &HealthSettings) -> Option<i64> {
    match state.state {
        HealthStatus::Ejected { until_ms, .. } => Some(until_ms),
        HealthStatus::Probation { since_ms, .. } => {
            Some(since_ms.saturating_add(settings.probation_max_ms))
        }
        HealthStatus::Suspect => Some(suspect_clears_at(state, settings)),
        HealthStatus::Healthy if state.level > 0 => Some(
            state
                .level_since_ms
                .saturating_add(settings.level_decay_ms.max(1)),
        ),
        HealthStatus::Healthy => None,
    }
}

/// Replays every deadline due by `now_ms`, each at its own time.
pub fn tick(
    state: &HealthState,
    settings: &HealthSettings,
    now_ms: i64,
) -> (HealthState, Vec<HealthEffect>) {
    let mut s = state.clone();
    let mut effects = Vec::new();
    for _ in 0..MAX_TICK_STEPS {
        let due = match next_deadline(&s, settings) {
            Some(at) if at <= now_ms => at,
            _ => break,
        };
        match s.state {
            HealthStatus::Ejected { .. } if settings.probation_successes == 0 => {
                end_probation(&mut s, due);
                effects.push(HealthEffect::BecameHealthy);
            }
            HealthStatus::Ejected { .. } => {
                s.state = HealthStatus::Probation {
                    remaining: settings.probation_successes,
                    since_ms: due,
                };
                effects.push(HealthEffect::ProbationStarted);
            }
            HealthStatus::Probation { .. } => {
                end_probation(&mut s, due);
                effects.push(HealthEffect::BecameHealthy);
            }
            HealthStatus::Suspect => {
                s.state = HealthStatus::Healthy;
                s.level_since_ms = due;
                effects.push(HealthEffect::BecameHealthy);
            }
            HealthStatus::Healthy => {
                let period = settings.level_decay_ms.max(1);
                let periods = now_ms.saturating_sub(s.level_since_ms) / period;
                let lowered = u32::try_from(periods).unwrap_or(u32::MAX).min(s.level);
                s.level -= lowered;
                s.level_since_ms = s
                    .level_since_ms
                    .saturating_add(period.saturating_mul(i64::from(lowered)));
                effects.push(HealthEffect::LevelLowered { level: s.level });
            }
        }
    }
    (s, effects)
}

/// Admin `unquarantine`: ends an ejection and starts probation (idempotent otherwise).
pub fn unquarantine(state: &HealthState, settings: &HealthSettings, now_ms: i64) -> HealthState {
    let mut s = state.clone();
    if let HealthStatus::Ejected { .. } = s.state {
        s.state = HealthStatus::Probation {
            remaining: settings.probation_successes.max(1),
            since_ms: now_ms,
        };
    }
    s
}

/// Admin `forget`: a fresh record (no strikes, level, probation or ejection).
pub fn forget() -> HealthState {
    HealthState::default()
}
