//! The settlement payload (docs/lifecycle.md §2): the JSON operators read from
//! `GET /v1/admin/escrows/{id}/settlement` and the `MsgSettleDevshardEscrow` built from it.
//!
//! `{escrow_id, version, state_root, nonce, fees, rest_hash, host_stats[], signatures[]}`; bytes
//! are standard padded base64 (Go `encoding/json`), integers JSON numbers. The root is the one the
//! chain recomputes: `sha256(host_stats_hash ‖ fees_be8 ‖ rest_hash ‖ sha256(version) ‖ 0x02)`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{
    cosmos::{MsgSettleDevshardEscrow, SlotSignature},
    crypto::Address,
    proto::{self, HostStatsMapProto, HostStatsProto},
    state::{compose_root, Phase, StateMachine},
    version::{ProtocolVersion, UnsupportedVersion},
    wire::b64,
};

/// Why a payload cannot be built or turned into a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("escrow {escrow} is in phase {phase}, not settlement")]
    NotInSettlement { escrow: String, phase: String },
    #[error("escrow id {0:?} is not a chain escrow id (uint64)")]
    BadEscrowId(String),
    #[error("state_root / rest_hash must be 32 bytes")]
    BadHash,
    #[error(transparent)]
    Version(#[from] UnsupportedVersion),
}

/// One slot's counters, as upstream's JSON names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatsEntry {
    pub slot_id: u32,
    pub missed: u32,
    pub invalid: u32,
    pub cost: u64,
    pub required_validations: u32,
    pub completed_validations: u32,
}

impl HostStatsEntry {
    fn from_proto(p: &HostStatsProto) -> Self {
        HostStatsEntry {
            slot_id: p.slot_id,
            missed: p.missed,
            invalid: p.invalid,
            cost: p.cost,
            required_validations: p.required_validations,
            completed_validations: p.completed_validations,
        }
    }

    fn to_proto(self) -> HostStatsProto {
        HostStatsProto {
            slot_id: self.slot_id,
            missed: self.missed,
            invalid: self.invalid,
            cost: self.cost,
            required_validations: self.required_validations,
            completed_validations: self.completed_validations,
        }
    }
}

/// One state signature (65 bytes `R ‖ S ‖ V`) of a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureEntry {
    pub slot_id: u32,
    #[serde(with = "b64::bytes")]
    pub signature: Vec<u8>,
}

/// The settlement payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementPayload {
    pub escrow_id: String,
    /// `StateRootAndProtocolVersion` (`"v2"`).
    pub version: String,
    #[serde(with = "b64::bytes")]
    pub state_root: Vec<u8>,
    pub nonce: u64,
    pub fees: u64,
    #[serde(with = "b64::bytes")]
    pub rest_hash: Vec<u8>,
    pub host_stats: Vec<HostStatsEntry>,
    pub signatures: Vec<SignatureEntry>,
}

impl SettlementPayload {
    /// The payload of a state machine in the Settlement phase, with the signatures collected
    /// for its latest nonce (slot → signature).
    pub fn from_state(
        sm: &StateMachine,
        signatures: &BTreeMap<u32, Vec<u8>>,
    ) -> Result<SettlementPayload, PayloadError> {
        if sm.phase() != Phase::Settlement {
            return Err(PayloadError::NotInSettlement {
                escrow: sm.escrow_id().to_owned(),
                phase: format!("{:?}", sm.phase()).to_lowercase(),
            });
        }
        Ok(SettlementPayload {
            escrow_id: sm.escrow_id().to_owned(),
            version: sm.config().protocol.root_tag().to_owned(),
            state_root: sm.root_with_phase(Phase::Settlement).to_vec(),
            nonce: sm.latest_nonce(),
            fees: sm.fees(),
            rest_hash: sm.rest_hash().to_vec(),
            host_stats: sm
                .host_stats_proto()
                .entries
                .iter()
                .map(HostStatsEntry::from_proto)
                .collect(),
            signatures: signatures
                .iter()
                .map(|(&slot_id, sig)| SignatureEntry {
                    slot_id,
                    signature: sig.clone(),
                })
                .collect(),
        })
    }

    /// The root recomputed from the payload's own fields (what the chain checks).
    pub fn recomputed_root(&self) -> Result<[u8; 32], PayloadError> {
        let rest: [u8; 32] = self
            .rest_hash
            .as_slice()
            .try_into()
            .map_err(|_| PayloadError::BadHash)?;
        let stats = HostStatsMapProto {
            entries: self.host_stats.iter().map(|h| h.to_proto()).collect(),
        };
        let stats_hash = crate::protocol::crypto::sha256(&proto::encode(&stats));
        let version = ProtocolVersion::parse(&self.version)?;
        Ok(compose_root(
            &stats_hash,
            self.fees,
            &rest,
            version,
            Phase::Settlement,
        ))
    }

    /// Total paid to hosts (`Σ cost`).
    pub fn total_cost(&self) -> u64 {
        self.host_stats
            .iter()
            .fold(0u64, |a, h| a.saturating_add(h.cost))
    }

    /// The chain message, settled by `settler` (the escrow creator).
    pub fn to_msg(&self, settler: &Address) -> Result<MsgSettleDevshardEscrow, PayloadError> {
        let escrow_id = self
            .escrow_id
            .parse::<u64>()
            .map_err(|_| PayloadError::BadEscrowId(self.escrow_id.clone()))?;
        Ok(MsgSettleDevshardEscrow {
            settler: settler.as_str().to_owned(),
            escrow_id,
            state_root: self.state_root.clone(),
            nonce: self.nonce,
            rest_hash: self.rest_hash.clone(),
            host_stats: self.host_stats.iter().map(|h| h.to_proto()).collect(),
            signatures: self
                .signatures
                .iter()
                .map(|s| SlotSignature {
                    slot_id: s.slot_id,
                    signature: s.signature.clone(),
                })
                .collect(),
            fees: self.fees,
            state_root_and_protocol_version: self.version.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{
        crypto::SigningKey,
        proto::{DevshardTx, MsgFinalizeRound, Tx},
        state::{SessionConfig, Slot},
    };

    fn settled_machine() -> StateMachine {
        let keys: Vec<SigningKey> = (0..3).map(|i| SigningKey::derive("p", i)).collect();
        let group = keys
            .iter()
            .enumerate()
            .map(|(i, k)| Slot {
                slot_id: i as u32,
                validator: k.address().clone(),
            })
            .collect();
        let mut sm =
            StateMachine::new("42", SessionConfig::default_for_group(3), group, 1_000_000).unwrap();
        for nonce in 1..=4u64 {
            let txs = if nonce == 1 {
                vec![DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {}))]
            } else {
                Vec::new()
            };
            sm.apply_best_effort(nonce, txs).unwrap();
        }
        sm
    }

    #[test]
    fn payload_root_is_the_settlement_root_and_json_uses_upstream_names() {
        let sm = settled_machine();
        assert_eq!(sm.phase(), Phase::Settlement);
        let sigs = BTreeMap::from([(0u32, vec![1u8; 65])]);
        let p = SettlementPayload::from_state(&sm, &sigs).unwrap();
        assert_eq!(p.recomputed_root().unwrap().to_vec(), p.state_root);
        assert_eq!(p.state_root, sm.state_root().to_vec());
        let json = serde_json::to_value(&p).unwrap();
        for k in [
            "escrow_id",
            "version",
            "state_root",
            "nonce",
            "fees",
            "rest_hash",
            "host_stats",
            "signatures",
        ] {
            assert!(json.get(k).is_some(), "{k}");
        }
        assert_eq!(json["version"], "v2");
        assert_eq!(json["host_stats"][0]["slot_id"], 0);
        let back: SettlementPayload = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        let msg = p.to_msg(&Address::unchecked("gonka1x")).unwrap();
        assert_eq!(msg.escrow_id, 42);
        assert_eq!(msg.signatures.len(), 1);
    }

    #[test]
    fn an_active_escrow_has_no_payload() {
        let keys = SigningKey::derive("p", 0);
        let group = vec![Slot {
            slot_id: 0,
            validator: keys.address().clone(),
        }];
        let sm =
            StateMachine::new("1", SessionConfig::default_for_group(1), group, 1_000_000).unwrap();
        assert!(matches!(
            SettlementPayload::from_state(&sm, &BTreeMap::new()),
            Err(PayloadError::NotInSettlement { .. })
        ));
    }
}
