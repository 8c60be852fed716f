//! Time-decayed performance estimates of one participant (docs/health.md §3): what hedging reads.
//!
//! Every quantity decays exponentially with `perf_half_life_ms`: a sample of age `a` weighs
//! `2^(−a / half_life)`. There is no window and no boundary, so one failure fades continuously.
//!
//! Decisions the spec leaves open, made here:
//! - **Counts are decayed counts.** `min_samples_for_decision` and
//!   `min_failures_for_unresponsive` compare with the decayed counts *rounded to the nearest whole
//!   number* (`decayed ≥ k − 0.5`, [`crate::policy::health::reaches`]): two failures within one half-life count as two, one failure
//!   (weight ≤ 1) never counts as two. Between samples every term of [`is_unresponsive`] moves one
//!   way (counts fall, the Beta-smoothed rate rises towards 1), so the verdict can only flip from
//!   unresponsive to responsive as time passes, never back, and never at a boundary.
//! - **First-token model:** `ttft = a + b · input_bytes`, a decayed weighted least-squares fit
//!   (`b ≥ 0`; `b = 0` while the inputs seen have no spread), with the residual variance as its
//!   spread. Per-byte ratios alone blow up for tiny prompts.
//! - **No data, little data:** latency estimates are blended with the default as if the default
//!   were one more sample ([`LATENCY_PRIOR_WEIGHT`]), so they move continuously from the default
//!   (`receipt_timeout_ms`, also used for first token) to the data, and back as data ages.
//! - Samples may arrive out of order (late finishes): an older sample is recorded with its own
//!   age's weight, so the estimates do not depend on arrival order.
//! - p95 is `mean + 1.645 · sd` of the decayed moments.

use serde::{Deserialize, Serialize};

use super::{
    health::{decay, reaches},
    settings::HealthSettings,
};
use crate::outcome::AttemptOutcome;

/// Pseudo-samples of the default latency blended into every latency estimate.
pub const LATENCY_PRIOR_WEIGHT: f64 = 1.0;
/// One-sided 95 % normal quantile.
const Z95: f64 = 1.645;
/// Input spread (bytes², as a variance) below which the first-token slope is not fitted.
const MIN_INPUT_VARIANCE: f64 = 1.0;

/// Decayed weighted mean and variance (West's incremental algorithm).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Moments {
    pub weight: f64,
    pub mean: f64,
    /// Weighted sum of squared deviations.
    pub m2: f64,
}

impl Moments {
    fn scaled(self, d: f64) -> Moments {
        Moments {
            weight: self.weight * d,
            m2: self.m2 * d,
            ..self
        }
    }

    fn add(self, x: f64, w: f64) -> Moments {
        let weight = self.weight + w;
        if weight <= 0.0 {
            return self;
        }
        let dx = x - self.mean;
        let mean = self.mean + w * dx / weight;
        Moments {
            weight,
            mean,
            m2: self.m2 + w * dx * (x - mean),
        }
    }

    pub fn variance(&self) -> f64 {
        if self.weight > 0.0 {
            (self.m2 / self.weight).max(0.0)
        } else {
            0.0
        }
    }
}

/// Decayed weighted least squares of `y = a + b·x` (co-moments, West-style).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LinearFit {
    pub weight: f64,
    pub mean_x: f64,
    pub mean_y: f64,
    pub cxx: f64,
    pub cxy: f64,
    pub cyy: f64,
}

impl LinearFit {
    fn scaled(self, d: f64) -> LinearFit {
        LinearFit {
            weight: self.weight * d,
            cxx: self.cxx * d,
            cxy: self.cxy * d,
            cyy: self.cyy * d,
            ..self
        }
    }

    fn add(self, x: f64, y: f64, w: f64) -> LinearFit {
        let weight = self.weight + w;
        if weight <= 0.0 {
            return self;
        }
        let (dx, dy) = (x - self.mean_x, y - self.mean_y);
        let mean_x = self.mean_x + w * dx / weight;
        let mean_y = self.mean_y + w * dy / weight;
        LinearFit {
            weight,
            mean_x,
            mean_y,
            cxx: self.cxx + w * dx * (x - mean_x),
            cxy: self.cxy + w * dx * (y - mean_y),
            cyy: self.cyy + w * dy * (y - mean_y),
        }
    }

    /// `(a, b)`: intercept (ms) and slope (ms per input byte, ≥ 0).
    pub fn coefficients(&self) -> (f64, f64) {
        let b = if self.weight > 0.0 && self.cxx / self.weight >= MIN_INPUT_VARIANCE {
            (self.cxy / self.cxx).max(0.0)
        } else {
            0.0
        };
        (self.mean_y - b * self.mean_x, b)
    }

    /// Variance of the residuals around the fitted line.
    pub fn residual_variance(&self) -> f64 {
        if self.weight <= 0.0 {
            return 0.0;
        }
        let (_, b) = self.coefficients();
        ((self.cyy - 2.0 * b * self.cxy + b * b * self.cxx) / self.weight).max(0.0)
    }
}

/// One attempt's contribution, from its own timestamps (never "now at settlement").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfSample {
    /// When the attempt ended (unix ms).
    pub at_ms: i64,
    pub success: bool,
    /// Receipt − send.
    pub receipt_ms: Option<f64>,
    /// First content − send.
    pub ttft_ms: Option<f64>,
    pub input_bytes: u64,
    /// Content chunks after the first, per second of streaming (successes only).
    pub tokens_per_s: Option<f64>,
}

impl PerfSample {
    /// The sample of a final outcome: only `Success` and `HostFault` become samples.
    pub fn from_outcome(outcome: &AttemptOutcome) -> Option<PerfSample> {
        if !outcome.class.is_sample() {
            return None;
        }
        let t = &outcome.timings;
        let since_send = |at: Option<i64>| {
            at.map(|a| a.saturating_sub(t.send_ms))
                .filter(|d| *d >= 0)
                .map(|d| d as f64)
        };
        let success = outcome.class == crate::outcome::OutcomeClass::Success;
        let tokens_per_s = match t.first_content_ms {
            Some(first) if success && t.content_chunks >= 2 && t.end_ms > first => {
                let secs = t.end_ms.saturating_sub(first) as f64 / 1000.0;
                Some(f64::from(t.content_chunks - 1) / secs)
            }
            _ => None,
        };
        Some(PerfSample {
            at_ms: t.end_ms.max(t.send_ms),
            success,
            receipt_ms: since_send(t.receipt_ms),
            ttft_ms: since_send(t.first_content_ms),
            input_bytes: t.input_bytes,
            tokens_per_s,
        })
    }
}

/// Decayed estimates of one participant (persisted with its health).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PerfEstimates {
    /// Time the weights below are as of.
    pub updated_ms: i64,
    pub successes: f64,
    pub failures: f64,
    pub receipt_ms: Moments,
    /// First-token latency (ms) over input bytes.
    pub first_token: LinearFit,
    pub tokens_per_s: Moments,
}

fn usable(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite() && *x >= 0.0)
}

/// The estimates after one more sample.
pub fn record(
    est: &PerfEstimates,
    sample: &PerfSample,
    settings: &HealthSettings,
) -> PerfEstimates {
    let half = settings.perf_half_life_ms;
    let (mut next, w) = if sample.at_ms >= est.updated_ms {
        let d = decay(1.0, est.updated_ms, sample.at_ms, half);
        let aged = PerfEstimates {
            updated_ms: sample.at_ms,
            successes: est.successes * d,
            failures: est.failures * d,
            receipt_ms: est.receipt_ms.scaled(d),
            first_token: est.first_token.scaled(d),
            tokens_per_s: est.tokens_per_s.scaled(d),
        };
        (aged, 1.0)
    } else {
        (est.clone(), decay(1.0, sample.at_ms, est.updated_ms, half))
    };
    if sample.success {
        next.successes += w;
    } else {
        next.failures += w;
    }
    if let Some(x) = usable(sample.receipt_ms) {
        next.receipt_ms = next.receipt_ms.add(x, w);
    }
    if let Some(y) = usable(sample.ttft_ms) {
        next.first_token = next.first_token.add(sample.input_bytes as f64, y, w);
    }
    if let Some(x) = usable(sample.tokens_per_s) {
        next.tokens_per_s = next.tokens_per_s.add(x, w);
    }
    next
}

impl PerfEstimates {
    fn factor(&self, settings: &HealthSettings, now_ms: i64) -> f64 {
        decay(1.0, self.updated_ms, now_ms, settings.perf_half_life_ms)
    }

    /// Decayed number of samples (successes + failures) at `now_ms`.
    pub fn decayed_samples(&self, settings: &HealthSettings, now_ms: i64) -> f64 {
        (self.successes + self.failures) * self.factor(settings, now_ms)
    }

    /// Decayed number of failures at `now_ms`.
    pub fn decayed_failures(&self, settings: &HealthSettings, now_ms: i64) -> f64 {
        self.failures * self.factor(settings, now_ms)
    }

    /// `(successes + prior) / (samples + prior)`, decayed; 1.0 with neither data nor prior.
    pub fn success_rate(&self, settings: &HealthSettings, now_ms: i64) -> f64 {
        let d = self.factor(settings, now_ms);
        let prior = settings.perf_prior_successes.max(0.0);
        let total = (self.successes + self.failures) * d + prior;
        if total > 0.0 {
            (self.successes * d + prior) / total
        } else {
            1.0
        }
    }

    /// Blends a data estimate of weight `w` with the default (see the module docs).
    fn blend(data: f64, w: f64, default: f64) -> f64 {
        if w > 0.0 && data.is_finite() {
            (w * data + LATENCY_PRIOR_WEIGHT * default) / (w + LATENCY_PRIOR_WEIGHT)
        } else {
            default
        }
    }

    /// Expected receipt p95 (ms): `receipt_timeout_ms` without data, never below the floor.
    pub fn expected_receipt_p95_ms(&self, settings: &HealthSettings, now_ms: i64) -> i64 {
        let m = self.receipt_ms;
        let data = m.mean + Z95 * m.variance().sqrt();
        let w = m.weight * self.factor(settings, now_ms);
        let est = Self::blend(data, w, settings.receipt_timeout_ms as f64);
        (est.ceil() as i64).max(settings.receipt_timeout_floor_ms)
    }

    /// Expected mean time to first content (ms) for a prompt of `input_bytes`.
    pub fn expected_first_token_ms(
        &self,
        settings: &HealthSettings,
        now_ms: i64,
        input_bytes: u64,
    ) -> i64 {
        let f = self.first_token;
        let (a, b) = f.coefficients();
        let data = (a + b * input_bytes as f64).max(0.0);
        let w = f.weight * self.factor(settings, now_ms);
        Self::blend(data, w, settings.receipt_timeout_ms as f64).ceil() as i64
    }

    /// Expected first-content p95 (ms) for `input_bytes`, never below `first_token_floor_ms`.
    pub fn expected_first_token_p95_ms(
        &self,
        settings: &HealthSettings,
        now_ms: i64,
        input_bytes: u64,
    ) -> i64 {
        let f = self.first_token;
        let (a, b) = f.coefficients();
        let data = (a + b * input_bytes as f64).max(0.0) + Z95 * f.residual_variance().sqrt();
        let w = f.weight * self.factor(settings, now_ms);
        let est = Self::blend(data, w, settings.receipt_timeout_ms as f64);
        (est.ceil() as i64).max(settings.first_token_floor_ms)
    }

    /// Decayed mean output rate (content chunks per second), if any success streamed.
    pub fn expected_tokens_per_s(&self) -> Option<f64> {
        (self.tokens_per_s.weight > 0.0).then_some(self.tokens_per_s.mean)
    }
}

/// Unresponsive (docs/health.md §3): enough decayed samples **and** enough decayed failures **and** a
/// decayed, Beta-smoothed success rate below `unresponsive_threshold`.
pub fn is_unresponsive(est: &PerfEstimates, settings: &HealthSettings, now_ms: i64) -> bool {
    reaches(
        est.decayed_samples(settings, now_ms),
        f64::from(settings.min_samples_for_decision),
    ) && reaches(
        est.decayed_failures(settings, now_ms),
        f64::from(settings.min_failures_for_unresponsive),
    ) && est.success_rate(settings, now_ms) < settings.unresponsive_threshold
}
