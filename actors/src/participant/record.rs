//! The persisted health record of one participant (restored when its actor restarts).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    outcome::{AttemptOutcome, OutcomeClass},
    protocol::crypto::Address,
};

/// What survives a participant actor's restart and a process restart.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ParticipantRecord {
    pub address: Option<Address>,
    /// Final outcomes seen, by class.
    pub outcomes: BTreeMap<OutcomeClass, u64>,
    /// Unix ms of the last outcome.
    pub last_outcome_ms: Option<i64>,
    /// Escrows this participant served outcomes for.
    pub escrows: Vec<String>,
}

impl ParticipantRecord {
    /// A new record for an address.
    pub fn new(address: Address) -> Self {
        ParticipantRecord {
            address: Some(address),
            ..Default::default()
        }
    }

    /// The record after one more outcome (pure: commit by swap).
    pub fn with_outcome(&self, outcome: &AttemptOutcome, now_ms: i64) -> ParticipantRecord {
        let mut next = self.clone();
        *next.outcomes.entry(outcome.class).or_insert(0) += 1;
        next.last_outcome_ms = Some(now_ms);
        if !next.escrows.contains(&outcome.escrow_id) {
            next.escrows.push(outcome.escrow_id.clone());
            next.escrows.sort();
        }
        next
    }
}
