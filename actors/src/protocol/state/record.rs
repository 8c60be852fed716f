//! The data model of a session (docs/protocol.md §4): group slots, the session phase, inference
//! records and per-slot host statistics, with their deterministic protobuf forms.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::short_bytes::ShortBytes;
use crate::protocol::{
    crypto::Address,
    proto::{self, HostStatsProto, InferenceRecordProto},
};

/// One slot of the group: `group[i] = {slot_id: i, validator}`. A validator address may hold
/// several slots ("multi-slot"); votes are deduplicated by address and weighted by slot count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub slot_id: u32,
    pub validator: Address,
}

/// Session phase; its numeric value is the last byte of the state root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Phase {
    Active = 0,
    Finalizing = 1,
    Settlement = 2,
}

impl Phase {
    /// The phase byte hashed into the state root.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Upstream status string (`active | finalizing | settlement`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Active => "active",
            Phase::Finalizing => "finalizing",
            Phase::Settlement => "settlement",
        }
    }
}

/// Lifecycle of one inference (`status` field of `InferenceRecordProto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum InferenceStatus {
    Pending = 0,
    Started = 1,
    Finished = 2,
    Challenged = 3,
    Validated = 4,
    Invalidated = 5,
    TimedOut = 6,
}

impl InferenceStatus {
    /// Numeric wire value.
    pub fn as_u32(self) -> u32 {
        u32::from(self as u8)
    }

    /// Upstream status string (`pending … timed_out`).
    pub fn as_str(self) -> &'static str {
        match self {
            InferenceStatus::Pending => "pending",
            InferenceStatus::Started => "started",
            InferenceStatus::Finished => "finished",
            InferenceStatus::Challenged => "challenged",
            InferenceStatus::Validated => "validated",
            InferenceStatus::Invalidated => "invalidated",
            InferenceStatus::TimedOut => "timed_out",
        }
    }

    /// Validated, Invalidated or TimedOut: no further transition is possible.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            InferenceStatus::Validated | InferenceStatus::Invalidated | InferenceStatus::TimedOut
        )
    }
}

impl std::fmt::Display for InferenceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One live inference. `inference_id` equals the nonce of the diff that started it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InferenceRecord {
    pub inference_id: u64,
    pub status: InferenceStatus,
    /// `group[inference_id % N].slot_id`.
    pub executor_slot: u32,
    /// Shared with the records before it of the same model (`StateMachine::apply_start`).
    pub model: Arc<str>,
    pub prompt_hash: ShortBytes,
    /// Set by MsgFinishInference.
    pub response_hash: ShortBytes,
    /// Request body length in bytes.
    pub input_length: u64,
    pub max_tokens: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `(input_length + max_tokens) * token_price`, taken from the balance at Start.
    pub reserved_cost: u64,
    /// `min(reserved_cost, (input_tokens + output_tokens) * token_price)` at Finish.
    pub actual_cost: u64,
    pub started_at: i64,
    /// The executor's receipt time (unix seconds), set by MsgConfirmStart.
    pub confirmed_at: i64,
    /// Slot-weighted tallies of validations (while Finished) and validation votes.
    pub votes_valid: u32,
    pub votes_invalid: u32,
    /// Bit `s` set when the address owning slot `s` validated or voted (16-byte LE on the wire).
    pub validated_by: u128,
}

impl InferenceRecord {
    /// The deterministic `InferenceRecordProto` (all 17 fields; `validated_by` always 16 bytes).
    pub fn to_proto(&self) -> InferenceRecordProto {
        InferenceRecordProto {
            inference_id: self.inference_id,
            status: self.status.as_u32(),
            executor_slot: self.executor_slot,
            model: self.model.to_string(),
            prompt_hash: self.prompt_hash.to_vec(),
            response_hash: self.response_hash.to_vec(),
            input_length: self.input_length,
            max_tokens: self.max_tokens,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            reserved_cost: self.reserved_cost,
            actual_cost: self.actual_cost,
            started_at: self.started_at,
            confirmed_at: self.confirmed_at,
            votes_valid: self.votes_valid,
            votes_invalid: self.votes_invalid,
            validated_by: self.validated_by.to_le_bytes().to_vec(),
        }
    }

    /// The committed entry bytes: `proto(InferenceRecordProto)`.
    pub fn entry_bytes(&self) -> Vec<u8> {
        proto::encode(&self.to_proto())
    }

    /// Whether slot `slot` has its bit set in `validated_by`.
    pub fn is_validated_by_slot(&self, slot: u32) -> bool {
        slot < 128 && (self.validated_by >> slot) & 1 == 1
    }
}

/// Per-slot counters committed by the state root (and reported at settlement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStats {
    /// Inferences of this executor slot that timed out.
    pub missed: u32,
    /// Inferences of this executor slot invalidated by vote.
    pub invalid: u32,
    /// Sum of actual costs earned as executor (minus invalidated ones).
    pub cost: u64,
    /// Validations this slot was required to do (not derived by the state machine; stays 0).
    pub required_validations: u32,
    /// Never changed by any tx (docs/versions.md: a validation changes only the record); stays 0.
    pub completed_validations: u32,
}

impl HostStats {
    /// The wire form for slot `slot_id`.
    pub fn to_proto(&self, slot_id: u32) -> HostStatsProto {
        HostStatsProto {
            slot_id,
            missed: self.missed,
            invalid: self.invalid,
            cost: self.cost,
            required_validations: self.required_validations,
            completed_validations: self.completed_validations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> InferenceRecord {
        InferenceRecord {
            inference_id: 7,
            status: InferenceStatus::Pending,
            executor_slot: 1,
            model: "m".into(),
            prompt_hash: vec![1; 32].into(),
            response_hash: vec![].into(),
            input_length: 10,
            max_tokens: 5,
            input_tokens: 0,
            output_tokens: 0,
            reserved_cost: 15,
            actual_cost: 0,
            started_at: 1_700_000_000,
            confirmed_at: 0,
            votes_valid: 0,
            votes_invalid: 0,
            validated_by: 0,
        }
    }

    #[test]
    fn validated_by_is_always_16_le_bytes() {
        let mut r = rec();
        assert_eq!(r.to_proto().validated_by, vec![0u8; 16]);
        r.validated_by = 1 | (1 << 9) | (1 << 127);
        let b = r.to_proto().validated_by;
        assert_eq!(b.len(), 16);
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 2);
        assert_eq!(b[15], 0x80);
        assert!(r.is_validated_by_slot(9) && !r.is_validated_by_slot(8));
        assert!(!r.is_validated_by_slot(200));
        // Field 17 (tag 0x8a 0x01, length 16) is always present, even when zero.
        let zero = rec().entry_bytes();
        assert!(zero.windows(3).any(|w| w == [0x8a, 0x01, 16]));
    }

    #[test]
    fn status_and_phase_names() {
        assert_eq!(InferenceStatus::TimedOut.as_str(), "timed_out");
        assert_eq!(InferenceStatus::Invalidated.as_u32(), 5);
        assert!(InferenceStatus::Validated.is_terminal());
        assert!(!InferenceStatus::Finished.is_terminal());
        assert_eq!(Phase::Settlement.as_u8(), 2);
        assert_eq!(Phase::Finalizing.as_str(), "finalizing");
    }
}
