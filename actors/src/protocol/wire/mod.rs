//! JSON wire types of the host HTTP API (docs/protocol.md §0, §3, §8.1), shaped exactly like upstream.
//!
//! Byte fields are standard padded base64 ([`b64`]), integers are plain JSON numbers and
//! `map[uint32][]byte` is an object keyed by decimal strings. Decoding is as lenient as Go's
//! `encoding/json`: unknown fields are ignored, missing fields take their zero value and `null`
//! is accepted for slices and maps. Optional byte fields are omitted when `None` or empty
//! (Go `omitempty`) and decode `""`/`null` to `None`.

pub mod b64;
mod request;

#[cfg(test)]
pub(crate) use request::encode_inference_request_slow;
pub use request::{encode_diff, encode_inference_request};

use std::collections::BTreeMap;

use prost::Message;
use serde::{Deserialize, Serialize};

use super::{
    diff::Diff,
    proto::{self, DevshardTx, DiffContent},
};

/// Errors of decoding wire JSON and the protobuf bytes it carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("invalid json: {0}")]
    Json(String),
    #[error("decode {what}: {source}")]
    Proto {
        what: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    #[error("decode tx {index}: {source}")]
    Tx {
        index: usize,
        #[source]
        source: prost::DecodeError,
    },
    #[error("diff nonce {outer} does not match the nonce {inner} encoded in its txs")]
    NonceMismatch { outer: u64, inner: u64 },
}

impl From<serde_json::Error> for WireError {
    fn from(e: serde_json::Error) -> Self {
        WireError::Json(e.to_string())
    }
}

/// `proto(DevshardTx)` of each tx (mempool, meta and gossip encoding).
pub fn encode_txs(txs: &[DevshardTx]) -> Vec<Vec<u8>> {
    txs.iter().map(proto::encode).collect()
}

/// Decodes `proto(DevshardTx)` entries; the first bad entry fails the whole list.
pub fn decode_txs(raw: &[Vec<u8>]) -> Result<Vec<DevshardTx>, WireError> {
    raw.iter()
        .enumerate()
        .map(|(index, b)| {
            DevshardTx::decode(b.as_slice()).map_err(|source| WireError::Tx { index, source })
        })
        .collect()
}

/// Upstream `DiffJSON`. `txs` is `proto(DiffContent{nonce, txs})` (fields 1–2 only); escrow id and
/// post-state root travel separately.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiffJson {
    pub nonce: u64,
    #[serde(with = "b64::bytes")]
    pub txs: Vec<u8>,
    #[serde(with = "b64::bytes")]
    pub user_sig: Vec<u8>,
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub post_state_root: Option<Vec<u8>>,
}

impl DiffJson {
    pub fn from_diff(d: &Diff) -> DiffJson {
        DiffJson {
            nonce: d.nonce,
            txs: d.wire_txs(),
            user_sig: d.user_sig.clone(),
            post_state_root: (!d.post_state_root.is_empty()).then(|| d.post_state_root.clone()),
        }
    }

    /// Decodes the txs proto; its inner nonce must equal `nonce`. Signatures are not checked here.
    pub fn to_diff(&self) -> Result<Diff, WireError> {
        let content =
            DiffContent::decode(self.txs.as_slice()).map_err(|source| WireError::Proto {
                what: "diff txs",
                source,
            })?;
        if content.nonce != self.nonce {
            return Err(WireError::NonceMismatch {
                outer: self.nonce,
                inner: content.nonce,
            });
        }
        Ok(Diff {
            nonce: self.nonce,
            txs: content.txs,
            user_sig: self.user_sig.clone(),
            post_state_root: self.post_state_root.clone().unwrap_or_default(),
        })
    }
}

/// Upstream `PayloadJSON`: the inference the executor must run and check against its Start tx.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PayloadJson {
    /// The raw OpenAI request body bytes.
    #[serde(with = "b64::bytes")]
    pub prompt: Vec<u8>,
    pub model: String,
    /// Body length in bytes (not tokens).
    pub input_length: u64,
    pub max_tokens: u64,
    /// Unix seconds.
    pub started_at: i64,
}

/// `POST …/chat/completions` body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InferenceRequest {
    #[serde(deserialize_with = "b64::null_as_default")]
    pub diffs: Vec<DiffJson>,
    /// Target nonce: the new diff, or the last diff of a catch-up chunk.
    pub nonce: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadJson>,
    /// Hint only; the real client omits it (the flag lives inside the prompt JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

/// `POST …/verify-timeout` body. `reason` is `"refused"` or `"execution"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifyTimeoutRequest {
    pub inference_id: u64,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diffs: Option<Vec<DiffJson>>,
}

/// `POST …/verify-timeout` answer; `signature = sign(TimeoutVoteContent{…, accept: true})`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifyTimeoutResponse {
    pub accept: bool,
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub signature: Option<Vec<u8>>,
    pub voter_slot: u32,
}

/// `GET …/signatures?nonce=N`: slot → state signature (`null` accepted and written for none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignaturesResponse {
    #[serde(with = "b64::opt_map")]
    pub signatures: Option<BTreeMap<u32, Vec<u8>>>,
}

/// One element of the `GET …/diffs` array.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiffRecord {
    pub diff: DiffJson,
    #[serde(with = "b64::bytes")]
    pub state_hash: Vec<u8>,
}

/// `GET …/mempool`: each entry is `proto(DevshardTx)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MempoolResponse {
    #[serde(with = "b64::seq")]
    pub txs: Vec<Vec<u8>>,
}

impl MempoolResponse {
    pub fn from_txs(txs: &[DevshardTx]) -> Self {
        MempoolResponse {
            txs: encode_txs(txs),
        }
    }

    pub fn decode_txs(&self) -> Result<Vec<DevshardTx>, WireError> {
        decode_txs(&self.txs)
    }
}

/// Body of the first SSE event: the host's state attestation and, for the executor, its receipt.
/// `nonce` is the host's latest nonce (may exceed the request's target nonce).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReceiptBody {
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub state_sig: Option<Vec<u8>>,
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub state_hash: Option<Vec<u8>>,
    pub nonce: u64,
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub receipt: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed_at: Option<i64>,
}

/// `{"devshard_receipt": {…}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptEvent {
    pub devshard_receipt: ReceiptBody,
}

/// Body of the last SSE event: the host's whole mempool, each entry `proto(DevshardTx)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetaBody {
    #[serde(with = "b64::seq")]
    pub mempool: Vec<Vec<u8>>,
}

impl MetaBody {
    pub fn from_txs(txs: &[DevshardTx]) -> Self {
        MetaBody {
            mempool: encode_txs(txs),
        }
    }

    pub fn decode_txs(&self) -> Result<Vec<DevshardTx>, WireError> {
        decode_txs(&self.mempool)
    }
}

/// `{"devshard_meta": {…}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaEvent {
    pub devshard_meta: MetaBody,
}

/// Echo's default error body `{"message": "…"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostErrorBody {
    pub message: String,
}

/// Legacy non-SSE answer to `POST …/chat/completions` (receipt fields plus the mempool).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InferenceResponse {
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub state_sig: Option<Vec<u8>>,
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub state_hash: Option<Vec<u8>>,
    pub nonce: u64,
    #[serde(with = "b64::opt_bytes", skip_serializing_if = "b64::is_absent")]
    pub receipt: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed_at: Option<i64>,
    #[serde(with = "b64::seq")]
    pub mempool: Vec<Vec<u8>>,
}

impl InferenceResponse {
    /// The same facts an SSE receipt event carries.
    pub fn receipt_body(&self) -> ReceiptBody {
        ReceiptBody {
            state_sig: self.state_sig.clone(),
            state_hash: self.state_hash.clone(),
            nonce: self.nonce,
            receipt: self.receipt.clone(),
            confirmed_at: self.confirmed_at,
        }
    }

    pub fn decode_mempool(&self) -> Result<Vec<DevshardTx>, WireError> {
        decode_txs(&self.mempool)
    }
}
