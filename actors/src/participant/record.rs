//! The persisted record of one participant: health state, perf estimates and outcome counts.
//! Written on every change and restored when the actor (re)starts.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::{
    outcome::{AttemptOutcome, OutcomeClass},
    policy::{health::HealthState, perf::PerfEstimates, reason::OutcomeReason},
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
    /// The last [`RECENT_STRIKES`] strikes, oldest first: why a host is suspect or ejected.
    pub recent_strikes: VecDeque<StrikeNote>,
}

/// Strikes a record keeps in [`ParticipantRecord::recent_strikes`].
pub const RECENT_STRIKES: usize = 8;

/// One strike: when, in which escrow, for what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StrikeNote {
    /// Unix ms.
    pub at_ms: i64,
    pub escrow: String,
    pub reason: OutcomeReason,
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

    /// Remembers a strike `outcome` carried (the oldest beyond [`RECENT_STRIKES`] is dropped).
    pub fn note_strike(&mut self, outcome: &AttemptOutcome, now_ms: i64) {
        self.recent_strikes.push_back(StrikeNote {
            at_ms: now_ms,
            escrow: outcome.escrow_id.clone(),
            reason: outcome.reason,
        });
        while self.recent_strikes.len() > RECENT_STRIKES {
            self.recent_strikes.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::AttemptTimings;

    fn refused(escrow: &str) -> AttemptOutcome {
        AttemptOutcome {
            escrow_id: escrow.to_owned(),
            nonce: 1,
            class: OutcomeClass::HostFault,
            reason: OutcomeReason::ConnectFailed,
            timings: AttemptTimings::default(),
            finish_late_ms: None,
        }
    }

    #[test]
    fn the_last_strikes_are_kept_in_order_and_survive_a_reload() {
        let mut r = ParticipantRecord::default();
        for i in 0..10 {
            r.note_strike(&refused(&i.to_string()), i);
        }
        let escrows: Vec<_> = r.recent_strikes.iter().map(|s| s.escrow.as_str()).collect();
        assert_eq!(escrows, ["2", "3", "4", "5", "6", "7", "8", "9"]);
        let stored = serde_json::to_value(&r).unwrap();
        assert_eq!(stored["recent_strikes"][7]["reason"], "connect_failed");
        let back: ParticipantRecord = serde_json::from_value(stored).unwrap();
        assert_eq!(back, r);
        let before: ParticipantRecord = serde_json::from_str("{\"escrows\": [\"1\"]}").unwrap();
        assert!(
            before.recent_strikes.is_empty(),
            "a record written before reads"
        );
    }
}
