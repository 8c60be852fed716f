//! Cosmos SDK transactions of the settlement (docs/lifecycle.md §2–§3).
//!
//! `MsgSettleDevshardEscrow` is declared by hand with prost derives, like [`super::proto`]. The
//! envelope uses the `cosmos-sdk-proto` types (`AuthInfo`, `SignerInfo`, `Fee`, `SignDoc`,
//! `TxRaw`), except `TxBody`: the crate's `TxBody` predates `unordered` (tag 4) and
//! `timeout_timestamp` (tag 5), so it is declared here with those fields.
//!
//! The tx is unordered (no sequence; the chain dedupes it by hash until its timeout), signed in
//! `SIGN_MODE_DIRECT`: a 64-byte low-S secp256k1 signature over `sha256(SignDoc)`. Its hash is
//! `UPPER(hex(sha256(tx_bytes)))`, so re-sending the same bytes is always the same tx.

use cosmos_sdk_proto::{
    cosmos::{
        base::v1beta1::Coin,
        crypto::secp256k1::PubKey,
        tx::{
            signing::v1beta1::SignMode,
            v1beta1::{mode_info, AuthInfo, Fee, ModeInfo, SignDoc, SignerInfo, TxRaw},
        },
    },
    Any, Timestamp,
};
use prost::Message;
use serde::{Deserialize, Serialize};

use super::{
    crypto::{sha256, SigningKey},
    proto::HostStatsProto,
    tx_timeout::TxTimeout,
};

/// Type URL of the settlement message.
pub const SETTLE_TYPE_URL: &str = "/inference.inference.MsgSettleDevshardEscrow";
/// Type URL of the escrow creation message.
pub const CREATE_TYPE_URL: &str = "/inference.inference.MsgCreateDevshardEscrow";
/// Type URL of a secp256k1 public key in a signer info.
pub const SECP256K1_PUBKEY_TYPE_URL: &str = "/cosmos.crypto.secp256k1.PubKey";

/// One host's state signature in the settlement (`{1 slot_id, 2 signature}`).
#[derive(Clone, PartialEq, Message)]
pub struct SlotSignature {
    #[prost(uint32, tag = "1")]
    pub slot_id: u32,
    #[prost(bytes = "vec", tag = "2")]
    pub signature: Vec<u8>,
}

/// `MsgSettleDevshardEscrow` (docs/lifecycle.md §2).
#[derive(Clone, PartialEq, Message)]
pub struct MsgSettleDevshardEscrow {
    #[prost(string, tag = "1")]
    pub settler: String,
    #[prost(uint64, tag = "2")]
    pub escrow_id: u64,
    #[prost(bytes = "vec", tag = "3")]
    pub state_root: Vec<u8>,
    #[prost(uint64, tag = "4")]
    pub nonce: u64,
    #[prost(bytes = "vec", tag = "5")]
    pub rest_hash: Vec<u8>,
    #[prost(message, repeated, tag = "6")]
    pub host_stats: Vec<HostStatsProto>,
    #[prost(message, repeated, tag = "7")]
    pub signatures: Vec<SlotSignature>,
    #[prost(uint64, tag = "8")]
    pub fees: u64,
    #[prost(string, tag = "9")]
    pub state_root_and_protocol_version: String,
}

/// `MsgCreateDevshardEscrow` (docs/lifecycle.md §4): a deposit of `amount` for `model_id`.
#[derive(Clone, PartialEq, Message)]
pub struct MsgCreateDevshardEscrow {
    #[prost(string, tag = "1")]
    pub creator: String,
    #[prost(uint64, tag = "2")]
    pub amount: u64,
    #[prost(string, tag = "3")]
    pub model_id: String,
}

/// `cosmos.tx.v1beta1.TxBody` with the unordered-tx fields.
#[derive(Clone, PartialEq, Message)]
pub struct TxBody {
    #[prost(message, repeated, tag = "1")]
    pub messages: Vec<Any>,
    #[prost(string, tag = "2")]
    pub memo: String,
    #[prost(uint64, tag = "3")]
    pub timeout_height: u64,
    #[prost(bool, tag = "4")]
    pub unordered: bool,
    #[prost(message, optional, tag = "5")]
    pub timeout_timestamp: Option<Timestamp>,
}

/// Fee, gas and timeout of settlement txs (upstream defaults: `1000000 ngonka`, gas `500000`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TxSettings {
    pub fee_amount: u64,
    pub fee_denom: String,
    pub gas_limit: u64,
    /// `timeout_timestamp = now + timeout_s` (upstream: 9 minutes).
    pub timeout_s: u64,
}

impl Default for TxSettings {
    fn default() -> Self {
        TxSettings {
            fee_amount: 1_000_000,
            fee_denom: "ngonka".to_owned(),
            gas_limit: 500_000,
            timeout_s: 540,
        }
    }
}

/// A signed tx: the exact bytes to broadcast and their hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedTx {
    #[serde(with = "super::wire::b64::bytes")]
    pub bytes: Vec<u8>,
    pub hash: String,
    /// Unix seconds after which the chain no longer accepts (or dedupes) this tx.
    pub timeout_unix_s: i64,
}

/// `UPPER(hex(sha256(tx_bytes)))`.
pub fn tx_hash(tx_bytes: &[u8]) -> String {
    hex::encode_upper(sha256(tx_bytes))
}

/// An unordered body carrying one message, valid until `timeout`.
pub fn unordered_body(message: Any, timeout: TxTimeout) -> TxBody {
    TxBody {
        messages: vec![message],
        memo: String::new(),
        timeout_height: 0,
        unordered: true,
        timeout_timestamp: Some(Timestamp {
            seconds: timeout.seconds,
            nanos: timeout.nanos,
        }),
    }
}

/// The settlement message packed as an `Any`.
pub fn settle_any(msg: &MsgSettleDevshardEscrow) -> Any {
    Any {
        type_url: SETTLE_TYPE_URL.to_owned(),
        value: msg.encode_to_vec(),
    }
}

/// One `SIGN_MODE_DIRECT` signer (sequence 0: unordered) and the fee.
pub fn auth_info(key: &SigningKey, settings: &TxSettings) -> AuthInfo {
    let public_key = Any {
        type_url: SECP256K1_PUBKEY_TYPE_URL.to_owned(),
        value: PubKey {
            key: key.public_key().serialize().to_vec(),
        }
        .encode_to_vec(),
    };
    // `AuthInfo::tip` is deprecated upstream; struct-update syntax leaves it at its default.
    let signer_infos = vec![SignerInfo {
        public_key: Some(public_key),
        mode_info: Some(ModeInfo {
            sum: Some(mode_info::Sum::Single(mode_info::Single {
                mode: SignMode::Direct as i32,
            })),
        }),
        sequence: 0,
    }];
    let fee = Some(Fee {
        amount: vec![Coin {
            denom: settings.fee_denom.clone(),
            amount: settings.fee_amount.to_string(),
        }],
        gas_limit: settings.gas_limit,
        payer: String::new(),
        granter: String::new(),
    });
    AuthInfo {
        signer_infos,
        fee,
        ..AuthInfo::default()
    }
}

/// The bytes a `SIGN_MODE_DIRECT` signer signs.
pub fn sign_doc_bytes(
    body_bytes: &[u8],
    auth_info_bytes: &[u8],
    chain_id: &str,
    account_number: u64,
) -> Vec<u8> {
    SignDoc {
        body_bytes: body_bytes.to_vec(),
        auth_info_bytes: auth_info_bytes.to_vec(),
        chain_id: chain_id.to_owned(),
        account_number,
    }
    .encode_to_vec()
}

/// Signs `body` for `chain_id` / `account_number` and returns the `TxRaw` bytes and hash.
pub fn sign_tx(
    key: &SigningKey,
    body: &TxBody,
    settings: &TxSettings,
    chain_id: &str,
    account_number: u64,
) -> SignedTx {
    let body_bytes = body.encode_to_vec();
    let auth_info_bytes = auth_info(key, settings).encode_to_vec();
    let doc = sign_doc_bytes(&body_bytes, &auth_info_bytes, chain_id, account_number);
    let signature = key.sign_digest_compact(sha256(&doc));
    let bytes = TxRaw {
        body_bytes,
        auth_info_bytes,
        signatures: vec![signature.to_vec()],
    }
    .encode_to_vec();
    SignedTx {
        hash: tx_hash(&bytes),
        bytes,
        timeout_unix_s: body.timeout_timestamp.map_or(0, |t| t.seconds),
    }
}

/// One message in a signed, unordered tx valid until `timeout` (callers take it from
/// [`TxTimeout::unique`], so no two txs of this process share it).
fn unordered_tx(
    key: &SigningKey,
    message: Any,
    settings: &TxSettings,
    chain_id: &str,
    account_number: u64,
    timeout: TxTimeout,
) -> SignedTx {
    let body = unordered_body(message, timeout);
    sign_tx(key, &body, settings, chain_id, account_number)
}

/// The signed, unordered settlement tx valid until `timeout`.
pub fn settle_tx(
    key: &SigningKey,
    msg: &MsgSettleDevshardEscrow,
    settings: &TxSettings,
    chain_id: &str,
    account_number: u64,
    timeout: TxTimeout,
) -> SignedTx {
    unordered_tx(
        key,
        settle_any(msg),
        settings,
        chain_id,
        account_number,
        timeout,
    )
}

/// The signed, unordered escrow creation tx (same envelope, fee and timeout as settlement).
pub fn create_tx(
    key: &SigningKey,
    msg: &MsgCreateDevshardEscrow,
    settings: &TxSettings,
    chain_id: &str,
    account_number: u64,
    timeout: TxTimeout,
) -> SignedTx {
    let any = Any {
        type_url: CREATE_TYPE_URL.to_owned(),
        value: msg.encode_to_vec(),
    };
    unordered_tx(key, any, settings, chain_id, account_number, timeout)
}

#[cfg(test)]
mod tests {
    use secp256k1::{ecdsa::Signature, Message as Digest, SECP256K1};

    use super::*;

    fn msg() -> MsgSettleDevshardEscrow {
        MsgSettleDevshardEscrow {
            settler: "gonka1settler".into(),
            escrow_id: 42,
            state_root: vec![7; 32],
            nonce: 57,
            rest_hash: vec![9; 32],
            host_stats: vec![HostStatsProto {
                slot_id: 1,
                cost: 500,
                ..HostStatsProto::default()
            }],
            signatures: vec![SlotSignature {
                slot_id: 1,
                signature: vec![1; 65],
            }],
            fees: 1000,
            state_root_and_protocol_version: "v2".into(),
        }
    }

    #[test]
    fn settle_message_bytes_follow_the_field_table() {
        let m = MsgSettleDevshardEscrow {
            settler: "ab".into(),
            escrow_id: 42,
            nonce: 3,
            fees: 1,
            state_root_and_protocol_version: "v2".into(),
            ..MsgSettleDevshardEscrow::default()
        };
        // 1:"ab", 2:42, 4:3, 8:1, 9:"v2" — proto3 zero fields omitted, field order.
        let want = [
            0x0a, 2, b'a', b'b', 0x10, 42, 0x20, 3, 0x40, 1, 0x4a, 2, b'v', b'2',
        ];
        assert_eq!(m.encode_to_vec(), want);
    }

    #[test]
    fn create_message_bytes_follow_the_field_table() {
        let m = MsgCreateDevshardEscrow {
            creator: "ab".into(),
            amount: 300,
            model_id: "m".into(),
        };
        // 1:"ab", 2:300 (varint ac 02), 3:"m".
        assert_eq!(
            m.encode_to_vec(),
            [0x0a, 2, b'a', b'b', 0x10, 0xac, 0x02, 0x1a, 1, b'm']
        );
        let key = SigningKey::derive("cosmos", 1);
        let tx = create_tx(
            &key,
            &m,
            &TxSettings::default(),
            "c",
            7,
            TxTimeout::after_s(1_000, 540),
        );
        let raw = TxRaw::decode(tx.bytes.as_slice()).unwrap();
        let body = TxBody::decode(raw.body_bytes.as_slice()).unwrap();
        assert_eq!(body.messages[0].type_url, CREATE_TYPE_URL);
        assert!(body.unordered);
        assert_eq!(tx.timeout_unix_s, 1_540);
    }

    #[test]
    fn unordered_body_sets_tags_4_and_5() {
        let body = unordered_body(settle_any(&msg()), TxTimeout::after_s(1_700_000_000, 540));
        let bytes = body.encode_to_vec();
        let decoded = TxBody::decode(bytes.as_slice()).unwrap();
        assert!(decoded.unordered);
        assert_eq!(decoded.timeout_timestamp.unwrap().seconds, 1_700_000_540);
        // tag 4 varint `true` is on the wire.
        assert!(bytes.windows(2).any(|w| w == [0x20, 1]));
        let any = &decoded.messages[0];
        assert_eq!(any.type_url, SETTLE_TYPE_URL);
        assert_eq!(
            MsgSettleDevshardEscrow::decode(any.value.as_slice()).unwrap(),
            msg()
        );
    }

    #[test]
    fn signed_tx_verifies_over_the_sign_doc_and_hashes_its_bytes() {
        let key = SigningKey::derive("cosmos", 1);
        let settings = TxSettings::default();
        let tx = settle_tx(
            &key,
            &msg(),
            &settings,
            "gonka-test",
            17,
            TxTimeout::after_s(1_700_000_000, 540),
        );
        assert_eq!(tx.hash, tx_hash(&tx.bytes));
        assert_eq!(tx.hash, tx.hash.to_uppercase());
        assert_eq!(tx.timeout_unix_s, 1_700_000_540);
        let raw = TxRaw::decode(tx.bytes.as_slice()).unwrap();
        let auth = AuthInfo::decode(raw.auth_info_bytes.as_slice()).unwrap();
        let fee = auth.fee.unwrap();
        assert_eq!(fee.gas_limit, 500_000);
        assert_eq!(fee.amount[0].amount, "1000000");
        assert_eq!(fee.amount[0].denom, "ngonka");
        let doc = sign_doc_bytes(&raw.body_bytes, &raw.auth_info_bytes, "gonka-test", 17);
        let sig = Signature::from_compact(&raw.signatures[0]).unwrap();
        let digest = Digest::from_digest(sha256(&doc));
        assert!(SECP256K1
            .verify_ecdsa(&digest, &sig, key.public_key())
            .is_ok());
        // Low-S: normalising changes nothing.
        let mut norm = sig;
        norm.normalize_s();
        assert_eq!(norm, sig);
        // Another account number is another sign doc: the signature does not verify.
        let other = sign_doc_bytes(&raw.body_bytes, &raw.auth_info_bytes, "gonka-test", 18);
        let digest = Digest::from_digest(sha256(&other));
        assert!(SECP256K1
            .verify_ecdsa(&digest, &sig, key.public_key())
            .is_err());
        // Same inputs, same bytes (RFC 6979): a re-sign is the same tx.
        let again = settle_tx(
            &key,
            &msg(),
            &settings,
            "gonka-test",
            17,
            TxTimeout::after_s(1_700_000_000, 540),
        );
        assert_eq!(again, tx);
    }
}
