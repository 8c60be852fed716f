//! The persisted record of one participant: health state, perf estimates and outcome counts.
//! Written on every change and restored when the actor (re)starts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    outcome::{AttemptOutcome, OutcomeClass},
    policy::{health::HealthState, perf::PerfEstimates},
    protocol::crypto::Address,
};

/// What survives a participant actor's restart and a process restart.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ParticipantRecord {
    pub address: Option<Address>,
    pub health: HealthState,
    pub perf: PerfEstimates,
    /// Final outcomes seen, by class.
    pub outcomes: BTreeMap<OutcomeClass, u64>,
    /// Unix ms of the last outcome.
    pub last_outcome_ms: Option<i64>,
    /// Escrows this participant served outcomes for.
    pub escrows: Vec<String>,
    /// When the current ejection began (for the time-to-recovery metric).
    pub ejected_at_ms: Option<i64>,
}

impl ParticipantRecord {
    /// A new record for an address.
    pub fn new(address: Address) -> Self {
        ParticipantRecord {
            address: Some(address),
            ..Default::default()
        }
    }

    /// The counters after one more outcome (health and perf are updated by the policy).
    pub fn count(&mut self, outcome: &AttemptOutcome, now_ms: i64) {
        *self.outcomes.entry(outcome.class).or_insert(0) += 1;
        self.last_outcome_ms = Some(now_ms);
        if !self.escrows.contains(&outcome.escrow_id) {
            self.escrows.push(outcome.escrow_id.clone());
            self.escrows.sort();
        }
    }
}
