//! Settlement metrics. Escrows are few, so an `escrow` label is allowed here (and only here).

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::machine::SettlementState;

/// Handles of the settlement metrics (cheap to clone).
#[derive(Debug, Clone)]
pub struct SettlementMetrics {
    /// Settlements ended on this replica, by result (`confirmed`, `already_settled`,
    /// `lease_lost`: another replica took the escrow over and drives it from there).
    pub settlements: IntCounterVec,
    /// 1 for the state each escrow is in (`escrow`, `state`).
    pub escrows: IntGaugeVec,
    /// From `settlement_started` to `settlement_confirmed`.
    pub duration: Histogram,
    /// Retries scheduled, by step.
    pub retries: IntCounterVec,
    /// Escrow balance left (`escrow`).
    pub balance: IntGaugeVec,
    /// Nonces left before the serving limit `max_nonce − (N + 1)` (`escrow`).
    pub nonces_left: IntGaugeVec,
    /// Final-state signatures judged while collecting, by result: `cold`, `warm` (counted),
    /// `wrong_signer`, `malformed`, `unknown_slot` (charged), `warm_key_unresolved`.
    pub signatures: IntCounterVec,
}

impl SettlementMetrics {
    /// Registers every metric; call once per registry.
    pub fn register(registry: &Registry) -> Result<SettlementMetrics, prometheus::Error> {
        let m = SettlementMetrics {
            settlements: IntCounterVec::new(
                Opts::new("settlements_total", "Escrow settlements ended, by result"),
                &["result"],
            )?,
            escrows: IntGaugeVec::new(
                Opts::new("escrows", "Escrows by settlement state (1 = current)"),
                &["escrow", "state"],
            )?,
            duration: Histogram::with_opts(
                HistogramOpts::new(
                    "settlement_duration_seconds",
                    "From settlement start to confirmation",
                )
                .buckets(vec![
                    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0,
                ]),
            )?,
            retries: IntCounterVec::new(
                Opts::new("settlement_retries_total", "Settlement retries by step"),
                &["step"],
            )?,
            balance: IntGaugeVec::new(
                Opts::new("escrow_balance", "Escrow balance left"),
                &["escrow"],
            )?,
            nonces_left: IntGaugeVec::new(
                Opts::new("escrow_nonces_left", "Nonces left before the serving limit"),
                &["escrow"],
            )?,
            signatures: IntCounterVec::new(
                Opts::new(
                    "settlement_signatures_total",
                    "Final-state signatures judged while collecting, by result",
                ),
                &["result"],
            )?,
        };
        registry.register(Box::new(m.signatures.clone()))?;
        registry.register(Box::new(m.balance.clone()))?;
        registry.register(Box::new(m.nonces_left.clone()))?;
        registry.register(Box::new(m.settlements.clone()))?;
        registry.register(Box::new(m.escrows.clone()))?;
        registry.register(Box::new(m.duration.clone()))?;
        registry.register(Box::new(m.retries.clone()))?;
        Ok(m)
    }

    /// Marks `state` as the escrow's current one.
    pub fn set_state(&self, escrow: &str, state: &SettlementState) {
        for label in SettlementState::LABELS {
            let v = i64::from(label == state.label());
            self.escrows.with_label_values(&[escrow, label]).set(v);
        }
    }
}
