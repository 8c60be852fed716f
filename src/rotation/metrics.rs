//! Rotation metrics (registry prefix `devshard`). Labels are bounded: `result` takes the values
//! below; `model` only the models of `[[rotation.models]]` and those escrows were created for.

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

use super::remote::BudgetSource;

/// Handles (cheap to clone).
#[derive(Debug, Clone)]
pub struct RotationMetrics {
    /// Creations ended, by result: `created`, `failed`, `refused`, `expired`, `error` (not
    /// signed: the chain could not be read).
    pub creations: IntCounterVec,
    /// Deposited today, per model.
    pub deposit_today: IntGaugeVec,
    /// Creations started, per model and why (`target`: too few active; `spare`: the runway is
    /// short, `super::runway`).
    pub rotations: IntCounterVec,
    /// Seconds the serving escrows last at the model's recent rate, as of the last check (-1:
    /// no rate measured yet).
    pub runway_seconds: IntGaugeVec,
    /// Escrows serving (active and low) per model, as of the last check.
    pub serving: IntGaugeVec,
    /// 1 while a model's creations back off after failures.
    pub backing_off: IntGaugeVec,
    /// Escrows of the last check by where their budget came from (`source`: the labels of
    /// [`BudgetSource`]).
    pub budget_sources: IntGaugeVec,
}

impl RotationMetrics {
    /// Registers every metric; call once per registry.
    pub fn register(registry: &Registry) -> Result<RotationMetrics, prometheus::Error> {
        let m = RotationMetrics {
            creations: IntCounterVec::new(
                Opts::new(
                    "escrow_creations_total",
                    "Escrow creations ended, by result",
                ),
                &["result"],
            )?,
            deposit_today: IntGaugeVec::new(
                Opts::new(
                    "rotation_deposit_today",
                    "Deposited in new escrows today (UTC), per model",
                ),
                &["model"],
            )?,
            rotations: IntCounterVec::new(
                Opts::new(
                    "rotations_total",
                    "Escrow creations the rotation started, per model and why (target, spare)",
                ),
                &["model", "why"],
            )?,
            runway_seconds: IntGaugeVec::new(
                Opts::new(
                    "rotation_runway_seconds",
                    "Seconds a model's serving escrows last at its recent nonce rate (-1: not measured)",
                ),
                &["model"],
            )?,
            serving: IntGaugeVec::new(
                Opts::new(
                    "rotation_serving_escrows",
                    "Escrows serving (active and low) per model, at the last rotation check",
                ),
                &["model"],
            )?,
            backing_off: IntGaugeVec::new(
                Opts::new(
                    "rotation_backing_off",
                    "1 while a model's escrow creations back off after a failure",
                ),
                &["model"],
            )?,
            budget_sources: IntGaugeVec::new(
                Opts::new(
                    "rotation_budget_sources",
                    "Escrows of the last rotation check by where their budget came from",
                ),
                &["source"],
            )?,
        };
        registry.register(Box::new(m.creations.clone()))?;
        registry.register(Box::new(m.deposit_today.clone()))?;
        registry.register(Box::new(m.rotations.clone()))?;
        registry.register(Box::new(m.runway_seconds.clone()))?;
        registry.register(Box::new(m.serving.clone()))?;
        registry.register(Box::new(m.backing_off.clone()))?;
        registry.register(Box::new(m.budget_sources.clone()))?;
        for l in BudgetSource::LABELS {
            m.budget_sources.with_label_values(&[l]).set(0);
        }
        Ok(m)
    }

    /// Sets the sources gauge to the count of each source in `sources`.
    pub fn count_sources<'a>(&self, sources: impl Iterator<Item = &'a BudgetSource>) {
        let mut counts = [0i64; BudgetSource::LABELS.len()];
        for s in sources {
            if let Some(i) = BudgetSource::LABELS.iter().position(|l| *l == s.label()) {
                counts[i] += 1;
            }
        }
        for (l, n) in BudgetSource::LABELS.iter().zip(counts) {
            self.budget_sources.with_label_values(&[l]).set(n);
        }
    }
}
