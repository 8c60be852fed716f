//! Known-answer tests: every vector of `data/devshard-vectors.json` (see the vectors README)
//! reproduced byte for byte — keys and addresses, request auth, canonical JSON and prompt hashes,
//! protobuf encodings, the `DiffJSON` wire form and every signature, which must match exactly
//! (RFC 6979, low-S) and recover to its signer.

// Test helpers outside `#[test]` fns are not covered by clippy's allow-*-in-tests settings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use devshard_actors::protocol::{
    auth::{request_digest, sign_request, verify_request, MAX_CLOCK_DRIFT_S},
    canonical::{canonical_json, prompt_hash},
    crypto::{recover_address, recover_address_digest, sha256, Address, SigningKey},
    diff::Diff,
    proto::{
        self, DevshardTx, DiffContent, ExecutorReceiptContent, MsgConfirmStart, MsgFinalizeRound,
        MsgFinishInference, MsgStartInference, StateSignatureContent, TimeoutReason,
        TimeoutVoteContent, Tx,
    },
    wire::{b64, DiffJson},
};
use prost::Message;
use serde_json::Value;

const VECTORS: &str = include_str!("data/devshard-vectors.json");

/// secp256k1 group order / 2, big-endian: a low-S signature has `s <= HALF_ORDER`.
const HALF_ORDER: &str = "7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0";

fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

fn hx(v: &Value) -> Vec<u8> {
    hex::decode(s(v)).unwrap()
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn key(v: &Value, name: &str) -> SigningKey {
    SigningKey::from_hex(s(&v["keys"][name]["private_key_hex"])).unwrap()
}

fn b32(v: &Value) -> [u8; 32] {
    hx(v).try_into().unwrap()
}

/// Checks one signature record against our signer and recovery, byte for byte.
fn check_signature(v: &Value, record: &Value, message: &[u8]) {
    let signer = key(v, s(&record["signer"]));
    let expected_addr = Address::parse(s(&v["keys"][s(&record["signer"])]["address"])).unwrap();
    assert_eq!(hx(&record["signed_message_hex"]), message, "signed message");
    let digest = sha256(message);
    assert_eq!(digest, b32(&record["signed_digest_hex"]), "signed digest");

    let sig = signer.sign(message);
    assert_eq!(
        hex::encode(sig),
        s(&record["signature_hex"]),
        "signature bytes"
    );
    assert_eq!(signer.sign_digest(digest), sig, "sign_digest of the digest");
    assert_eq!(b64::encode(&sig), s(&record["signature_base64"]));
    assert_eq!(hex::encode(&sig[..32]), s(&record["r_hex"]));
    assert_eq!(hex::encode(&sig[32..64]), s(&record["s_hex"]));
    assert_eq!(u64::from(sig[64]), n(&record["v"]));
    assert!(sig[32..64] <= hex::decode(HALF_ORDER).unwrap()[..], "low-S");

    let fixed = hx(&record["signature_hex"]);
    let recovered = recover_address(message, &fixed).unwrap();
    assert_eq!(recovered.as_str(), s(&record["recovered_address"]));
    assert_eq!(recovered, expected_addr);
    assert_eq!(
        recover_address_digest(digest, &fixed).unwrap(),
        expected_addr
    );

    let mut changed = message.to_vec();
    changed[0] ^= 1;
    if let Ok(other) = recover_address(&changed, &fixed) {
        assert_ne!(other, expected_addr, "a changed message must not verify");
    }
}

#[test]
fn every_vector_section_is_covered() {
    let v = vectors();
    let keys: BTreeSet<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let covered: BTreeSet<&str> = [
        "description",
        "conventions",
        "generator",
        "keys",
        "auth",
        "prompt_hash",
        "start",
        "diff",
        "receipt",
        "extra_confirm_start",
        "finish",
        "extra_finalize_round",
        "state_sig",
        "timeout_vote",
    ]
    .into_iter()
    .collect();
    assert_eq!(keys, covered, "a vector section was added or removed");
    assert_eq!(s(&v["conventions"]["escrow_id"]), "42");
}

#[test]
fn keys_pubkeys_and_addresses() {
    let v = vectors();
    for name in ["gateway", "host_a", "host_b"] {
        let rec = &v["keys"][name];
        let k = key(&v, name);
        assert_eq!(k.secret_hex(), s(&rec["private_key_hex"]));
        assert_eq!(
            hex::encode(k.public_key().serialize()),
            s(&rec["compressed_pubkey_hex"])
        );
        assert_eq!(
            hex::encode(k.public_key().serialize_uncompressed()),
            s(&rec["uncompressed_pubkey_hex"])
        );
        assert_eq!(k.address().as_str(), s(&rec["address"]));
        assert_eq!(Address::parse(s(&rec["address"])).unwrap(), *k.address());
    }
}

#[test]
fn auth_digest_and_headers() {
    let v = vectors();
    let a = &v["auth"];
    let escrow = s(&a["escrow_id"]);
    let body = s(&a["body_utf8"]).as_bytes();
    let ts = n(&a["timestamp"]);
    assert_eq!(body, hx(&a["body_hex"]));
    assert_eq!(ts.to_be_bytes().to_vec(), hx(&a["timestamp_be8_hex"]));
    let preimage = [escrow.as_bytes(), body, &ts.to_be_bytes()].concat();
    assert_eq!(preimage, hx(&a["digest_preimage_hex"]));

    let digest = request_digest(escrow, body, ts);
    assert_eq!(digest, b32(&a["digest_hex"]));
    assert_eq!(sha256(&digest), b32(&a["signed_digest_hex"]));
    check_signature(&v, &a["signature"], &digest);

    let gateway = key(&v, s(&a["signer"]));
    let headers = sign_request(&gateway, escrow, body, ts);
    assert_eq!(headers.signature_hex, s(&a["header_x_devshard_signature"]));
    assert_eq!(headers.timestamp, s(&a["header_x_devshard_timestamp"]));

    let now = ts as i64;
    let sig = Some(s(&a["header_x_devshard_signature"]));
    let tsh = Some(s(&a["header_x_devshard_timestamp"]));
    let addr = verify_request(escrow, body, sig, tsh, now, MAX_CLOCK_DRIFT_S).unwrap();
    assert_eq!(&addr, gateway.address());
    let other = verify_request(escrow, b"{}", sig, tsh, now, MAX_CLOCK_DRIFT_S).unwrap();
    assert_ne!(
        &other,
        gateway.address(),
        "another body must not verify as the gateway"
    );
}

#[test]
fn prompt_hash_and_canonical_json() {
    let v = vectors();
    let p = &v["prompt_hash"];
    let body = s(&p["body_utf8"]).as_bytes();
    assert_eq!(body, hx(&p["body_hex"]));
    let canonical = canonical_json(body).unwrap();
    assert_eq!(canonical, s(&p["canonical_json"]));
    assert_eq!(canonical.as_bytes(), hx(&p["canonical_json_hex"]));
    assert_eq!(prompt_hash(body).unwrap(), b32(&p["prompt_hash_hex"]));

    let extra = &p["extra_auth_body"];
    let body = s(&extra["body_utf8"]).as_bytes();
    assert_eq!(canonical_json(body).unwrap(), s(&extra["canonical_json"]));
    assert_eq!(prompt_hash(body).unwrap(), b32(&extra["prompt_hash_hex"]));
}

fn start_msg(v: &Value) -> MsgStartInference {
    let f = &v["start"]["fields"];
    MsgStartInference {
        inference_id: n(&f["inference_id"]),
        prompt_hash: hx(&f["prompt_hash_hex"]),
        model: s(&f["model"]).to_string(),
        input_length: n(&f["input_length"]),
        max_tokens: n(&f["max_tokens"]),
        started_at: n(&f["started_at"]) as i64,
    }
}

#[test]
fn start_inference_encoding() {
    let v = vectors();
    let msg = start_msg(&v);
    let body = s(&v["prompt_hash"]["body_utf8"]).as_bytes();
    assert_eq!(msg.prompt_hash, prompt_hash(body).unwrap());
    assert_eq!(msg.input_length, body.len() as u64);
    assert_eq!(
        proto::encode(&msg),
        hx(&v["start"]["msg_start_inference_proto_hex"])
    );
    let tx = DevshardTx::new(Tx::StartInference(msg.clone()));
    let tx_hex = hx(&v["start"]["devshard_tx_proto_hex"]);
    assert_eq!(proto::encode(&tx), tx_hex);
    assert_eq!(DevshardTx::decode(tx_hex.as_slice()).unwrap(), tx);
}

#[test]
fn diff_signature_wire_form_and_round_trip() {
    let v = vectors();
    let d = &v["diff"];
    let escrow = s(&d["escrow_id"]);
    let root = b32(&d["post_state_root_hex"]);
    let txs: Vec<DevshardTx> = d["txs_devshard_tx_proto_hex"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| DevshardTx::decode(hx(t).as_slice()).unwrap())
        .collect();
    assert_eq!(
        txs,
        vec![DevshardTx::new(Tx::StartInference(start_msg(&v)))]
    );

    let gateway = key(&v, s(&d["user_sig"]["signer"]));
    let diff = Diff::sign(n(&d["nonce"]), txs, escrow, root, &gateway);
    let signed = diff.signed_content(escrow);
    assert_eq!(signed, hx(&d["diff_content_signed_proto_hex"]));
    assert_eq!(diff.user_sig, hx(&d["user_sig"]["signature_hex"]));
    check_signature(&v, &d["user_sig"], &signed);
    assert_eq!(diff.wire_txs(), hx(&d["diff_content_wire_txs_proto_hex"]));
    diff.verify_user_sig(escrow, gateway.address()).unwrap();
    assert!(diff.verify_user_sig("43", gateway.address()).is_err());

    // Our serialisation is exactly the wire string and object.
    let json = DiffJson::from_diff(&diff);
    assert_eq!(serde_json::to_string(&json).unwrap(), s(&d["wire_json"]));
    assert_eq!(serde_json::to_value(&json).unwrap(), d["wire_json_object"]);

    // Parsing the wire string back (README "How a test should use them", step 4).
    let parsed: DiffJson = serde_json::from_str(s(&d["wire_json"])).unwrap();
    assert_eq!(parsed, json);
    assert_eq!(parsed.txs, hx(&d["diff_content_wire_txs_proto_hex"]));
    let inner = DiffContent::decode(parsed.txs.as_slice()).unwrap();
    let rebuilt = DiffContent {
        escrow_id: escrow.to_string(),
        post_state_root: parsed.post_state_root.clone().unwrap(),
        ..inner
    };
    assert_eq!(
        proto::encode(&rebuilt),
        hx(&d["diff_content_signed_proto_hex"])
    );
    let back = parsed.to_diff().unwrap();
    assert_eq!(back, diff);
    assert_eq!(
        recover_address(&back.signed_content(escrow), &back.user_sig).unwrap(),
        *gateway.address()
    );
}

#[test]
fn executor_receipt() {
    let v = vectors();
    let r = &v["receipt"];
    let f = &r["fields"];
    let content = ExecutorReceiptContent {
        inference_id: n(&f["inference_id"]),
        prompt_hash: hx(&f["prompt_hash_hex"]),
        model: s(&f["model"]).to_string(),
        input_length: n(&f["input_length"]),
        max_tokens: n(&f["max_tokens"]),
        started_at: n(&f["started_at"]) as i64,
        escrow_id: s(&f["escrow_id"]).to_string(),
        confirmed_at: n(&f["confirmed_at"]) as i64,
    };
    let bytes = proto::encode(&content);
    assert_eq!(bytes, hx(&r["executor_receipt_content_proto_hex"]));
    check_signature(&v, &r["signature"], &bytes);
    let sig = hx(&r["signature"]["signature_hex"]);
    assert_eq!(
        recover_address(&bytes, &sig).unwrap().as_str(),
        s(&r["expected_recovered_address"])
    );
}

#[test]
fn extra_confirm_start_encoding() {
    let v = vectors();
    let c = &v["extra_confirm_start"];
    let f = &c["fields"];
    assert_eq!(
        f["executor_sig_hex"],
        v["receipt"]["signature"]["signature_hex"]
    );
    let msg = MsgConfirmStart {
        inference_id: n(&f["inference_id"]),
        executor_sig: hx(&f["executor_sig_hex"]),
        confirmed_at: n(&f["confirmed_at"]) as i64,
    };
    assert_eq!(proto::encode(&msg), hx(&c["msg_confirm_start_proto_hex"]));
    let tx = DevshardTx::new(Tx::ConfirmStart(msg));
    assert_eq!(proto::encode(&tx), hx(&c["devshard_tx_proto_hex"]));
}

#[test]
fn finish_inference_and_proposer_sig() {
    let v = vectors();
    let fin = &v["finish"];
    let f = &fin["fields"];
    let response_hash = sha256(s(&f["response_hash_preimage_utf8"]).as_bytes());
    assert_eq!(response_hash, b32(&f["response_hash_hex"]));
    let mut msg = MsgFinishInference {
        inference_id: n(&f["inference_id"]),
        response_hash: response_hash.to_vec(),
        input_tokens: n(&f["input_tokens"]),
        output_tokens: n(&f["output_tokens"]),
        executor_slot: n(&f["executor_slot"]) as u32,
        proposer_sig: Vec::new(),
        escrow_id: s(&f["escrow_id"]).to_string(),
    };
    let unsigned = proto::encode(&msg);
    assert_eq!(unsigned, hx(&fin["unsigned_proto_hex"]));
    check_signature(&v, &fin["proposer_sig"], &unsigned);
    msg.proposer_sig = key(&v, s(&fin["proposer_sig"]["signer"]))
        .sign(&unsigned)
        .to_vec();
    assert_eq!(proto::encode(&msg), hx(&fin["signed_proto_hex"]));
    let tx = DevshardTx::new(Tx::FinishInference(msg));
    let tx_hex = hx(&fin["devshard_tx_proto_hex"]);
    assert_eq!(proto::encode(&tx), tx_hex);
    assert_eq!(DevshardTx::decode(tx_hex.as_slice()).unwrap(), tx);
}

#[test]
fn extra_finalize_round_encoding() {
    let v = vectors();
    let tx = DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {}));
    assert_eq!(
        hex::encode(proto::encode(&tx)),
        s(&v["extra_finalize_round"]["devshard_tx_proto_hex"])
    );
    assert_eq!(hex::encode(proto::encode(&tx)), "4200");
}

#[test]
fn state_signature() {
    let v = vectors();
    let st = &v["state_sig"];
    let f = &st["fields"];
    let content = StateSignatureContent {
        state_root: hx(&f["state_root_hex"]),
        escrow_id: s(&f["escrow_id"]).to_string(),
        nonce: n(&f["nonce"]),
    };
    let bytes = proto::encode(&content);
    assert_eq!(bytes, hx(&st["state_signature_content_proto_hex"]));
    check_signature(&v, &st["signature"], &bytes);
    let sig = hx(&st["signature"]["signature_hex"]);
    assert_eq!(
        recover_address(&bytes, &sig).unwrap().as_str(),
        s(&st["expected_recovered_address"])
    );
}

#[test]
fn timeout_vote() {
    let v = vectors();
    let t = &v["timeout_vote"];
    let f = &t["fields"];
    assert_eq!(s(&f["reason"]), "EXECUTION");
    assert_eq!(n(&f["reason_value"]), TimeoutReason::Execution as u64);
    let content = TimeoutVoteContent {
        escrow_id: s(&f["escrow_id"]).to_string(),
        inference_id: n(&f["inference_id"]),
        reason: TimeoutReason::Execution as i32,
        accept: f["accept"].as_bool().unwrap(),
    };
    let bytes = proto::encode(&content);
    assert_eq!(bytes, hx(&t["timeout_vote_content_proto_hex"]));
    check_signature(&v, &t["signature"], &bytes);
    let sig = hx(&t["signature"]["signature_hex"]);
    assert_eq!(
        recover_address(&bytes, &sig).unwrap().as_str(),
        s(&t["expected_recovered_address"])
    );
}
