//! An independent check of a settlement, written from LIFECYCLE.md §2–§3 with nothing but
//! sha2, secp256k1, base64 and the cosmos-sdk-proto envelope types — none of the gateway's own
//! functions. It recomputes the state root from the payload JSON, verifies the tx signature
//! over the SignDoc and every quorum signature over `StateSignatureContent`.

use std::collections::BTreeSet;

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use cosmos_sdk_proto::cosmos::tx::v1beta1::{SignDoc, TxRaw};
use prost::Message;
use secp256k1::{
    ecdsa::{RecoverableSignature, RecoveryId, Signature},
    Message as Digest, PublicKey, SECP256K1,
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field_varint(tag: u64, v: u64, out: &mut Vec<u8>) {
    if v != 0 {
        varint(tag << 3, out);
        varint(v, out);
    }
}

fn field_bytes(tag: u64, v: &[u8], out: &mut Vec<u8>) {
    if !v.is_empty() {
        varint((tag << 3) | 2, out);
        varint(v.len() as u64, out);
        out.extend_from_slice(v);
    }
}

fn b64(v: &Value) -> Vec<u8> {
    B64.decode(v.as_str().unwrap()).unwrap()
}

/// `sha256(host_stats_hash ‖ fees_be8 ‖ rest_hash ‖ sha256(version) ‖ 0x02)` from the JSON.
pub fn recompute_root(payload: &Value) -> Vec<u8> {
    let mut map = Vec::new();
    for h in payload["host_stats"].as_array().unwrap() {
        let mut e = Vec::new();
        for (tag, name) in [
            (1, "slot_id"),
            (2, "missed"),
            (3, "invalid"),
            (4, "cost"),
            (5, "required_validations"),
            (6, "completed_validations"),
        ] {
            field_varint(tag, h[name].as_u64().unwrap(), &mut e);
        }
        varint((1 << 3) | 2, &mut map);
        varint(e.len() as u64, &mut map);
        map.extend(e);
    }
    let mut pre = sha(&map).to_vec();
    pre.extend(payload["fees"].as_u64().unwrap().to_be_bytes());
    pre.extend(b64(&payload["rest_hash"]));
    pre.extend(sha(payload["version"].as_str().unwrap().as_bytes()));
    pre.push(2);
    sha(&pre).to_vec()
}

/// Verifies the tx's one signature over `SignDoc{body, auth_info, chain_id, account_number}`.
pub fn verify_tx(tx_bytes: &[u8], chain_id: &str, account_number: u64, signer: &PublicKey) {
    let raw = TxRaw::decode(tx_bytes).unwrap();
    let doc = SignDoc {
        body_bytes: raw.body_bytes.clone(),
        auth_info_bytes: raw.auth_info_bytes.clone(),
        chain_id: chain_id.to_owned(),
        account_number,
    }
    .encode_to_vec();
    assert_eq!(raw.signatures.len(), 1);
    let sig = Signature::from_compact(&raw.signatures[0]).expect("64-byte signature");
    SECP256K1
        .verify_ecdsa(&Digest::from_digest(sha(&doc)), &sig, signer)
        .expect("tx signature verifies (and is low-S)");
}

/// Every signature recovers to its slot's host over `StateSignatureContent`; returns the weight
/// (slots of distinct signers). `slot_keys[i]` is the public key of slot `i`'s validator.
pub fn quorum_weight(payload: &Value, slot_keys: &[PublicKey]) -> usize {
    let root = b64(&payload["state_root"]);
    let mut content = Vec::new();
    field_bytes(1, &root, &mut content);
    field_bytes(
        2,
        payload["escrow_id"].as_str().unwrap().as_bytes(),
        &mut content,
    );
    field_varint(3, payload["nonce"].as_u64().unwrap(), &mut content);
    let digest = Digest::from_digest(sha(&content));
    let mut signers = BTreeSet::new();
    for s in payload["signatures"].as_array().unwrap() {
        let slot = s["slot_id"].as_u64().unwrap() as usize;
        let sig = b64(&s["signature"]);
        assert_eq!(sig.len(), 65);
        let id = RecoveryId::try_from(i32::from(sig[64])).unwrap();
        let rs = RecoverableSignature::from_compact(&sig[..64], id).unwrap();
        let pk = SECP256K1.recover_ecdsa(&digest, &rs).unwrap();
        assert_eq!(
            pk, slot_keys[slot],
            "signature of slot {slot} is its validator's"
        );
        signers.insert(pk.serialize());
    }
    slot_keys
        .iter()
        .filter(|k| signers.contains(&k.serialize()))
        .count()
}
