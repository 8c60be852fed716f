//! Protobuf messages of the `devshard.v1` wire schema (docs/protocol.md Appendix A).
//!
//! Declared by hand with `prost` derives; field numbers and scalar types are the contract. prost
//! writes fields in field-number order and omits proto3 zero scalars, so the bytes match the
//! upstream `proto.Marshal` output for every signed message (pinned by the known-answer vectors).

use prost::Message;

/// Why a timeout is claimed (`TimeoutReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum TimeoutReason {
    Unspecified = 0,
    Refused = 1,
    Execution = 2,
}

impl TimeoutReason {
    /// Wire string used by `verify-timeout` (`"refused"` / `"execution"`).
    pub fn as_wire(self) -> &'static str {
        match self {
            TimeoutReason::Unspecified => "unspecified",
            TimeoutReason::Refused => "refused",
            TimeoutReason::Execution => "execution",
        }
    }

    /// Parses the wire string; `None` for anything but `refused` / `execution`.
    pub fn from_wire(s: &str) -> Option<Self> {
        match s {
            "refused" => Some(TimeoutReason::Refused),
            "execution" => Some(TimeoutReason::Execution),
            _ => None,
        }
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgStartInference {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(bytes = "vec", tag = "2")]
    pub prompt_hash: Vec<u8>,
    #[prost(string, tag = "3")]
    pub model: String,
    #[prost(uint64, tag = "4")]
    pub input_length: u64,
    #[prost(uint64, tag = "5")]
    pub max_tokens: u64,
    #[prost(int64, tag = "6")]
    pub started_at: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgConfirmStart {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(bytes = "vec", tag = "2")]
    pub executor_sig: Vec<u8>,
    #[prost(int64, tag = "3")]
    pub confirmed_at: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgFinishInference {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(bytes = "vec", tag = "2")]
    pub response_hash: Vec<u8>,
    #[prost(uint64, tag = "3")]
    pub input_tokens: u64,
    #[prost(uint64, tag = "4")]
    pub output_tokens: u64,
    #[prost(uint32, tag = "5")]
    pub executor_slot: u32,
    #[prost(bytes = "vec", tag = "6")]
    pub proposer_sig: Vec<u8>,
    #[prost(string, tag = "7")]
    pub escrow_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct TimeoutVote {
    #[prost(uint32, tag = "1")]
    pub voter_slot: u32,
    #[prost(bool, tag = "2")]
    pub accept: bool,
    #[prost(bytes = "vec", tag = "3")]
    pub signature: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgTimeoutInference {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(enumeration = "TimeoutReason", tag = "2")]
    pub reason: i32,
    #[prost(message, repeated, tag = "3")]
    pub votes: Vec<TimeoutVote>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgValidation {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(uint32, tag = "2")]
    pub validator_slot: u32,
    #[prost(bool, tag = "3")]
    pub valid: bool,
    #[prost(bytes = "vec", tag = "4")]
    pub proposer_sig: Vec<u8>,
    #[prost(string, tag = "5")]
    pub escrow_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgValidationVote {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(uint32, tag = "2")]
    pub voter_slot: u32,
    #[prost(bool, tag = "3")]
    pub vote_valid: bool,
    #[prost(bytes = "vec", tag = "4")]
    pub proposer_sig: Vec<u8>,
    #[prost(string, tag = "5")]
    pub escrow_id: String,
}

/// Deprecated upstream; accepted and ignored by the state machine.
#[derive(Clone, PartialEq, Message)]
pub struct MsgRevealSeed {
    #[prost(uint32, tag = "1")]
    pub slot_id: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub signature: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub proposer_sig: Vec<u8>,
    #[prost(string, tag = "4")]
    pub escrow_id: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct MsgFinalizeRound {}

/// One transaction of a diff or a mempool (`DevshardTx` oneof; the tag is the kind).
#[derive(Clone, PartialEq, Message)]
pub struct DevshardTx {
    #[prost(oneof = "Tx", tags = "1, 2, 3, 4, 5, 6, 7, 8")]
    pub tx: Option<Tx>,
}

/// The members of `DevshardTx`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Tx {
    #[prost(message, tag = "1")]
    StartInference(MsgStartInference),
    #[prost(message, tag = "2")]
    ConfirmStart(MsgConfirmStart),
    #[prost(message, tag = "3")]
    FinishInference(MsgFinishInference),
    #[prost(message, tag = "4")]
    TimeoutInference(MsgTimeoutInference),
    #[prost(message, tag = "5")]
    Validation(MsgValidation),
    #[prost(message, tag = "6")]
    ValidationVote(MsgValidationVote),
    #[prost(message, tag = "7")]
    RevealSeed(MsgRevealSeed),
    #[prost(message, tag = "8")]
    FinalizeRound(MsgFinalizeRound),
}

impl DevshardTx {
    /// Wraps one member.
    pub fn new(tx: Tx) -> Self {
        DevshardTx { tx: Some(tx) }
    }
}

/// Signed diff content. On the wire (`DiffJSON.txs`) only fields 1–2 are encoded; the signature
/// covers all four.
#[derive(Clone, PartialEq, Message)]
pub struct DiffContent {
    #[prost(uint64, tag = "1")]
    pub nonce: u64,
    #[prost(message, repeated, tag = "2")]
    pub txs: Vec<DevshardTx>,
    #[prost(string, tag = "3")]
    pub escrow_id: String,
    #[prost(bytes = "vec", tag = "4")]
    pub post_state_root: Vec<u8>,
}

/// What the executor signs as its receipt.
#[derive(Clone, PartialEq, Message)]
pub struct ExecutorReceiptContent {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(bytes = "vec", tag = "2")]
    pub prompt_hash: Vec<u8>,
    #[prost(string, tag = "3")]
    pub model: String,
    #[prost(uint64, tag = "4")]
    pub input_length: u64,
    #[prost(uint64, tag = "5")]
    pub max_tokens: u64,
    #[prost(int64, tag = "6")]
    pub started_at: i64,
    #[prost(string, tag = "7")]
    pub escrow_id: String,
    #[prost(int64, tag = "8")]
    pub confirmed_at: i64,
}

/// What a verifier signs when it accepts a timeout claim.
#[derive(Clone, PartialEq, Message)]
pub struct TimeoutVoteContent {
    #[prost(string, tag = "1")]
    pub escrow_id: String,
    #[prost(uint64, tag = "2")]
    pub inference_id: u64,
    #[prost(enumeration = "TimeoutReason", tag = "3")]
    pub reason: i32,
    #[prost(bool, tag = "4")]
    pub accept: bool,
}

/// What every host signs to attest its state root at a nonce.
#[derive(Clone, PartialEq, Message)]
pub struct StateSignatureContent {
    #[prost(bytes = "vec", tag = "1")]
    pub state_root: Vec<u8>,
    #[prost(string, tag = "2")]
    pub escrow_id: String,
    #[prost(uint64, tag = "3")]
    pub nonce: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct HostStatsProto {
    #[prost(uint32, tag = "1")]
    pub slot_id: u32,
    #[prost(uint32, tag = "2")]
    pub missed: u32,
    #[prost(uint32, tag = "3")]
    pub invalid: u32,
    #[prost(uint64, tag = "4")]
    pub cost: u64,
    #[prost(uint32, tag = "5")]
    pub required_validations: u32,
    #[prost(uint32, tag = "6")]
    pub completed_validations: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct HostStatsMapProto {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<HostStatsProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InferenceRecordProto {
    #[prost(uint64, tag = "1")]
    pub inference_id: u64,
    #[prost(uint32, tag = "2")]
    pub status: u32,
    #[prost(uint32, tag = "3")]
    pub executor_slot: u32,
    #[prost(string, tag = "4")]
    pub model: String,
    #[prost(bytes = "vec", tag = "5")]
    pub prompt_hash: Vec<u8>,
    #[prost(bytes = "vec", tag = "6")]
    pub response_hash: Vec<u8>,
    #[prost(uint64, tag = "7")]
    pub input_length: u64,
    #[prost(uint64, tag = "8")]
    pub max_tokens: u64,
    #[prost(uint64, tag = "9")]
    pub input_tokens: u64,
    #[prost(uint64, tag = "10")]
    pub output_tokens: u64,
    #[prost(uint64, tag = "11")]
    pub reserved_cost: u64,
    #[prost(uint64, tag = "12")]
    pub actual_cost: u64,
    #[prost(int64, tag = "13")]
    pub started_at: i64,
    #[prost(int64, tag = "14")]
    pub confirmed_at: i64,
    #[prost(uint32, tag = "15")]
    pub votes_valid: u32,
    #[prost(uint32, tag = "16")]
    pub votes_invalid: u32,
    #[prost(bytes = "vec", tag = "17")]
    pub validated_by: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InferencesMapProto {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<InferenceRecordProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SessionConfigProto {
    #[prost(int64, tag = "1")]
    pub refusal_timeout: i64,
    #[prost(int64, tag = "2")]
    pub execution_timeout: i64,
    #[prost(uint64, tag = "3")]
    pub token_price: u64,
    #[prost(uint64, tag = "4")]
    pub create_devshard_fee: u64,
    #[prost(uint64, tag = "5")]
    pub fee_per_nonce: u64,
    #[prost(uint32, tag = "6")]
    pub vote_threshold: u32,
    #[prost(uint32, tag = "7")]
    pub validation_rate: u32,
    #[prost(uint32, tag = "8")]
    pub inference_seal_grace_nonces: u32,
    #[prost(uint32, tag = "9")]
    pub inference_seal_grace_seconds: u32,
    #[prost(uint32, tag = "10")]
    pub auto_seal_every_n_nonces: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct SlotAssignmentProto {
    #[prost(uint32, tag = "1")]
    pub slot_id: u32,
    #[prost(string, tag = "2")]
    pub validator_address: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct EscrowStateProto {
    #[prost(string, tag = "1")]
    pub escrow_id: String,
    #[prost(string, tag = "2")]
    pub state_root_and_protocol_version: String,
    #[prost(message, optional, tag = "3")]
    pub config: Option<SessionConfigProto>,
    #[prost(message, repeated, tag = "4")]
    pub group: Vec<SlotAssignmentProto>,
    #[prost(uint64, tag = "5")]
    pub balance: u64,
    #[prost(uint64, tag = "6")]
    pub fees: u64,
    #[prost(uint32, tag = "7")]
    pub phase: u32,
    #[prost(uint64, tag = "8")]
    pub finalize_nonce: u64,
    #[prost(uint64, tag = "12")]
    pub latest_nonce: u64,
    #[prost(bytes = "vec", tag = "13")]
    pub sealed_acc: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct StateSnapshotProto {
    #[prost(message, optional, tag = "1")]
    pub state: Option<EscrowStateProto>,
}

/// Encodes any message to its proto3 bytes.
pub fn encode<M: Message>(m: &M) -> Vec<u8> {
    m.encode_to_vec()
}
