//! JSON shapes of the chain REST (grpc-gateway) and public API answers the gateway reads.
//!
//! grpc-gateway encodes `uint64` as JSON strings; other encoders (and the simulator's public
//! API) use numbers. Every integer here accepts both ([`de_u64`]); absent or `null` means 0.
//! Unknown fields are ignored: the chain may add fields at any time.

use devshard_actors::protocol::state::SessionConfig;
use serde::{de, Deserialize, Deserializer};

/// A `uint64` given as a JSON string or number (`null`/absent → 0).
pub fn de_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Num {
        N(u64),
        S(String),
        F(f64),
        Null(()),
    }
    match Num::deserialize(d)? {
        Num::N(n) => Ok(n),
        Num::S(s) if s.trim().is_empty() => Ok(0),
        Num::S(s) => s
            .trim()
            .parse()
            .map_err(|_| de::Error::custom(format!("{s:?} is not an unsigned integer"))),
        Num::F(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(f as u64),
        Num::F(f) => Err(de::Error::custom(format!("{f} is not an unsigned integer"))),
        Num::Null(()) => Ok(0),
    }
}

/// An id given as a JSON string or number.
pub fn de_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        N(u64),
        S(String),
    }
    Ok(match Id::deserialize(d)? {
        Id::N(n) => n.to_string(),
        Id::S(s) => s,
    })
}

/// `GET …/devshard_escrow/{id}`.
#[derive(Debug, Clone, Deserialize)]
pub struct EscrowResponse {
    #[serde(default)]
    pub found: bool,
    #[serde(default)]
    pub escrow: Option<ChainEscrow>,
}

/// One slot of the escrow's group: an address, or an object naming one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SlotEntry {
    Address(String),
    Object {
        #[serde(alias = "validator_address", alias = "validator")]
        address: String,
    },
}

impl SlotEntry {
    pub fn address(&self) -> &str {
        match self {
            SlotEntry::Address(a) | SlotEntry::Object { address: a } => a,
        }
    }
}

/// The escrow record.
#[derive(Debug, Clone, Deserialize)]
pub struct ChainEscrow {
    #[serde(default, deserialize_with = "de_id")]
    pub id: String,
    #[serde(default)]
    pub creator: String,
    #[serde(default, deserialize_with = "de_u64")]
    pub amount: u64,
    #[serde(default)]
    pub slots: Vec<SlotEntry>,
    #[serde(default, deserialize_with = "de_u64")]
    pub epoch_index: u64,
    #[serde(default)]
    pub settled: bool,
    #[serde(default, deserialize_with = "de_u64")]
    pub token_price: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub create_devshard_fee: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub fee_per_nonce: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub inference_seal_grace_nonces: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub inference_seal_grace_seconds: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub auto_seal_every_n_nonces: u64,
    /// Chain nonce limit, when the chain reports one (0 = not reported).
    #[serde(default, deserialize_with = "de_u64")]
    pub max_nonce: u64,
    /// The model the escrow serves, when the chain (or the simulator) says.
    #[serde(default, alias = "model_id")]
    pub model: Option<String>,
    /// Simulator extension: the exact frozen session config every host uses.
    #[serde(default)]
    pub session_config: Option<SessionConfig>,
}

/// `GET …/participant/{addr}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ParticipantResponse {
    pub participant: ChainParticipant,
}

/// A participant record.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChainParticipant {
    #[serde(default)]
    pub index: String,
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub inference_url: String,
    #[serde(default, deserialize_with = "de_u64")]
    pub weight: u64,
}

/// `GET …/params`.
#[derive(Debug, Clone, Deserialize)]
pub struct ParamsResponse {
    pub params: ChainParams,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChainParams {
    #[serde(default)]
    pub devshard_escrow_params: Option<EscrowParams>,
}

/// The devshard escrow parameters (0 = not set: the session default applies).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EscrowParams {
    #[serde(default, deserialize_with = "de_u64")]
    pub refusal_timeout: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub execution_timeout: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub validation_rate: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub vote_threshold_factor: u64,
    #[serde(default, deserialize_with = "de_u64")]
    pub max_nonce: u64,
}

/// One participant of the current epoch (only what model discovery needs; from the chain
/// poller's participants snapshot).
#[derive(Debug, Clone, Deserialize)]
pub struct PublicParticipant {
    #[serde(default)]
    pub index: String,
    #[serde(default)]
    pub models: Vec<String>,
}
