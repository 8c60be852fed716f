//! The state root (docs/protocol.md §5.4, upstream `state/hash.go`), with the escrow's version tag
//! (`"v2"` or `"v4.1"`, [`ProtocolVersion::root_tag`]):
//!
//! ```text
//! host_stats_hash = sha256(proto(HostStatsMapProto{entries sorted by slot}))
//! live_hash       = sha256(proto(InferencesMapProto{live records sorted by id}))
//! inferences_hash = sha256(sealed_acc(32) ‖ live_hash)
//! warm_keys_hash  = sha256(for slot asc: slot_be4 ‖ len_be4 ‖ addr)   (`protocol/warm/hash.rs`)
//! rest_hash       = sha256(balance_be8 ‖ inferences_hash ‖ warm_keys_hash)
//! state_root      = sha256(host_stats_hash ‖ fees_be8 ‖ rest_hash ‖ sha256(tag) ‖ phase_u8)
//! ```
//!
//! Host stats: like upstream, every group slot has an entry from creation on (zero counters
//! included), so the map always lists slots `0..N-1`. The sealed accumulator folds
//! `sha256(acc ‖ seal_nonce_be8 ‖ id_be8 ‖ entry)` (see `seal.rs`).

use sha2::{Digest, Sha256};

use crate::protocol::{
    crypto::sha256,
    proto::{self, HostStatsMapProto},
    version::ProtocolVersion,
};

use super::{record::Phase, StateMachine};

impl StateMachine {
    /// The current state root (after the latest applied nonce).
    pub fn state_root(&self) -> [u8; 32] {
        self.root_with_phase(self.st.phase)
    }

    /// The root this state would have in `phase` (the chain recomputes settlement roots with
    /// `phase = Settlement`).
    pub fn root_with_phase(&self, phase: Phase) -> [u8; 32] {
        compose_root(
            &self.host_stats_hash(),
            self.st.fees,
            &self.rest_hash(),
            self.session.config.protocol,
            phase,
        )
    }

    /// `sha256(proto(HostStatsMapProto))` over every group slot in ascending order.
    pub fn host_stats_hash(&self) -> [u8; 32] {
        sha256(&proto::encode(&self.host_stats_proto()))
    }

    /// Host stats of every slot, as reported in the settlement payload.
    pub fn host_stats_proto(&self) -> HostStatsMapProto {
        HostStatsMapProto {
            entries: self
                .session
                .group
                .iter()
                .map(|s| self.host_stats(s.slot_id).to_proto(s.slot_id))
                .collect(),
        }
    }

    /// `sha256(proto(InferencesMapProto))` over the live records in id order, kept
    /// incrementally by `records.rs` (only records changed since the last apply are hashed).
    pub fn live_hash(&self) -> [u8; 32] {
        self.st.records.live_hash()
    }

    /// `sha256(sealed_acc ‖ live_hash)`.
    pub fn inferences_hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.st.sealed_acc);
        h.update(self.live_hash());
        h.finalize().into()
    }

    /// `sha256(balance_be8 ‖ inferences_hash ‖ warm_keys_hash)`, part of the settlement payload.
    pub fn rest_hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.st.balance.to_be_bytes());
        h.update(self.inferences_hash());
        h.update(self.warm_keys_hash());
        h.finalize().into()
    }
}

/// `sha256(host_stats_hash ‖ fees_be8 ‖ rest_hash ‖ sha256(version tag) ‖ phase_u8)`.
pub fn compose_root(
    host_stats_hash: &[u8; 32],
    fees: u64,
    rest_hash: &[u8; 32],
    version: ProtocolVersion,
    phase: Phase,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(host_stats_hash);
    h.update(fees.to_be_bytes());
    h.update(rest_hash);
    h.update(sha256(version.root_tag().as_bytes()));
    h.update([phase.as_u8()]);
    h.finalize().into()
}

/// `sha256(acc ‖ seal_nonce_be8 ‖ id_be8 ‖ entry)`: one step of the sealed accumulator.
pub fn fold_sealed(acc: &[u8; 32], seal_nonce: u64, inference_id: u64, entry: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(acc);
    h.update(seal_nonce.to_be_bytes());
    h.update(inference_id.to_be_bytes());
    h.update(entry);
    h.finalize().into()
}
