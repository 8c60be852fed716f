//! A serializable copy of a whole session, for persistence (the gateway snapshots its local state
//! machine periodically and replays the diffs after it on restart) and for debug dumps.
//!
//! Restoring re-validates the group and the shape of the ledger, so a corrupted snapshot is an
//! error rather than a panic later on.

use std::{collections::BTreeMap, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::protocol::crypto::Address;

use super::{
    HostStats, InferenceRecord, Ledger, Phase, Records, Session, SessionConfig, Slot, StateError,
    StateMachine,
};

/// Everything a [`StateMachine`] holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSnapshot {
    pub escrow_id: String,
    pub config: SessionConfig,
    pub group: Vec<Slot>,
    pub balance: u64,
    pub fees: u64,
    pub phase: Phase,
    pub finalize_nonce: u64,
    pub latest_nonce: u64,
    /// Hex of the 32-byte sealed accumulator.
    pub sealed_acc: String,
    pub sealed_count: u64,
    /// Live records in id order.
    pub records: Vec<InferenceRecord>,
    /// One entry per slot, in slot order.
    pub host_stats: Vec<HostStats>,
    /// Warm key bound to each slot (absent in snapshots older than warm keys).
    #[serde(default)]
    pub warm_keys: BTreeMap<u32, Address>,
}

impl StateMachine {
    /// A full copy of the session.
    pub fn snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            escrow_id: self.session.escrow_id.clone(),
            config: self.session.config.clone(),
            group: self.session.group.clone(),
            balance: self.st.balance,
            fees: self.st.fees,
            phase: self.st.phase,
            finalize_nonce: self.st.finalize_nonce,
            latest_nonce: self.st.latest_nonce,
            sealed_acc: hex::encode(self.st.sealed_acc),
            sealed_count: self.st.sealed_count,
            records: self.st.records.iter().cloned().collect(),
            host_stats: self.st.host_stats.clone(),
            warm_keys: self.st.warm_keys.as_ref().clone(),
        }
    }

    /// Rebuilds a session from [`StateMachine::snapshot`] output.
    pub fn from_snapshot(s: StateSnapshot) -> Result<Self, StateError> {
        // Validates the group exactly as a fresh session does.
        let fresh = StateMachine::new(s.escrow_id, s.config, s.group, u64::MAX)?;
        let n = fresh.group_size();
        let bad = |what: String| StateError::InvalidGroup(format!("snapshot: {what}"));
        if s.host_stats.len() != n {
            return Err(bad(format!(
                "{} host stats for {n} slots",
                s.host_stats.len()
            )));
        }
        let sealed_acc: [u8; 32] = hex::decode(&s.sealed_acc)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| bad("sealed_acc is not 32 hex bytes".into()))?;
        let mut records = BTreeMap::new();
        for r in s.records {
            if fresh.slot_address(r.executor_slot).is_none() {
                return Err(bad(format!(
                    "record {} has executor slot {}",
                    r.inference_id, r.executor_slot
                )));
            }
            if records.insert(r.inference_id, r).is_some() {
                return Err(StateError::DuplicateInferenceID);
            }
        }
        if let Some(slot) = s
            .warm_keys
            .keys()
            .find(|k| fresh.slot_address(**k).is_none())
        {
            return Err(bad(format!("warm key bound to slot {slot}")));
        }
        let st = Ledger {
            balance: s.balance,
            fees: s.fees,
            phase: s.phase,
            finalize_nonce: s.finalize_nonce,
            latest_nonce: s.latest_nonce,
            sealed_acc,
            sealed_count: s.sealed_count,
            records: Records::from_sorted(records.into_values()),
            host_stats: s.host_stats,
            warm_keys: Arc::new(s.warm_keys),
        };
        let session: Arc<Session> = fresh.session;
        Ok(StateMachine {
            session,
            st,
            warm: fresh.warm,
        })
    }
}
