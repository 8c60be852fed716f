//! Today's deposits per model (UTC day), persisted under [`NS_DEPOSITS`] so a restart does not
//! reset the daily cap. A deposit is added (durable) before its creation tx is broadcast and
//! given back only when the tx can no longer take money (failed, refused, expired) on the day
//! it was counted.

use devshard_actors::{clock::SharedClock, store::SharedStore};
use serde::{Deserialize, Serialize};

use super::{intent::CreateIntent, metrics::RotationMetrics, plan::utc_day, CreateError};
use crate::store::duty;

/// Store namespace: key = model.
pub const NS_DEPOSITS: &str = "rotation_deposit";

/// One model's deposits of one day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayDeposits {
    pub day: i64,
    pub total: u64,
}

/// The book (cheap to clone; writes are serialised by the creator's lock).
#[derive(Clone)]
pub struct Deposits {
    pub(super) store: SharedStore,
    pub(super) clock: SharedClock,
    pub(super) metrics: Option<RotationMetrics>,
}

impl Deposits {
    fn read(&self, model: &str) -> DayDeposits {
        self.store
            .get(NS_DEPOSITS, model)
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }

    /// What `model` deposited today.
    pub fn today(&self, model: &str) -> u64 {
        let d = self.read(model);
        if d.day == utc_day(self.clock.now_ms()) {
            d.total
        } else {
            0
        }
    }

    fn publish(&self, model: &str, total: u64) {
        if let Some(m) = &self.metrics {
            m.deposit_today
                .with_label_values(&[model])
                .set(i64::try_from(total).unwrap_or(i64::MAX));
        }
    }

    async fn write(&self, model: &str, d: DayDeposits) -> Result<(), CreateError> {
        let value = serde_json::to_value(d).map_err(|e| CreateError::Store(e.to_string()))?;
        self.store
            .put_fenced(duty::ROTATION, NS_DEPOSITS, model, value)
            .await
            .map_err(|e| CreateError::Store(e.to_string()))?;
        self.publish(model, d.total);
        Ok(())
    }

    /// Counts `intent`'s deposit for today (durable when this returns).
    pub async fn add(&self, intent: &CreateIntent) -> Result<(), CreateError> {
        let day = utc_day(intent.created_at_ms);
        let total = self.today(&intent.model).saturating_add(intent.amount);
        self.write(&intent.model, DayDeposits { day, total }).await
    }

    /// Gives back the deposit of an intent that took no money, if counted today.
    pub async fn refund(&self, intent: &CreateIntent) {
        let day = utc_day(intent.created_at_ms);
        let d = self.read(&intent.model);
        if d.day != day {
            return;
        }
        let total = d.total.saturating_sub(intent.amount);
        let _ = self.write(&intent.model, DayDeposits { day, total }).await;
    }

    /// Re-exports each model's gauge (at start and on every tick, so a new day shows 0).
    pub fn refresh(&self, models: &[String]) {
        for m in models {
            self.publish(m, self.today(m));
        }
    }
}
