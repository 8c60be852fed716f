//! JSON wire shapes of the host API: field names, omission rules, base64 and decimal-string map
//! keys, Go-style `null`s, and the `DiffJSON` conversions.

// Test helpers outside `#[test]` fns are not covered by clippy's allow-*-in-tests settings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use devshard_actors::protocol::{
    crypto::SigningKey,
    diff::Diff,
    proto::{self, DevshardTx, DiffContent, MsgFinalizeRound, Tx},
    wire::{
        b64, DiffJson, DiffRecord, HostErrorBody, InferenceRequest, MempoolResponse, MetaEvent,
        PayloadJson, ReceiptBody, ReceiptEvent, SignaturesResponse, VerifyTimeoutRequest,
        VerifyTimeoutResponse, WireError,
    },
};
use prost::Message;
use serde_json::json;

fn finalize_tx() -> DevshardTx {
    DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {}))
}

fn signed_diff(nonce: u64) -> Diff {
    Diff::sign(
        nonce,
        vec![finalize_tx()],
        "42",
        [9; 32],
        &SigningKey::derive("wire", 0),
    )
}

fn payload() -> PayloadJson {
    PayloadJson {
        prompt: br#"{"messages":[]}"#.to_vec(),
        model: "m".into(),
        input_length: 15,
        max_tokens: 64,
        started_at: 1_700_000_000,
    }
}

#[test]
fn inference_request_shape() {
    let d = signed_diff(3);
    let req = InferenceRequest {
        diffs: vec![DiffJson::from_diff(&d)],
        nonce: 3,
        payload: None,
        stream: None,
    };
    let v = serde_json::to_value(&req).unwrap();
    assert_eq!(
        v.as_object().unwrap().len(),
        2,
        "payload and stream omitted: {v}"
    );
    assert_eq!(v["nonce"], json!(3));
    assert_eq!(v["diffs"][0]["nonce"], json!(3));
    assert_eq!(v["diffs"][0]["txs"], json!(b64::encode(&d.wire_txs())));

    let full = InferenceRequest {
        payload: Some(payload()),
        stream: Some(true),
        ..req.clone()
    };
    let v = serde_json::to_value(&full).unwrap();
    assert_eq!(v["stream"], json!(true));
    assert_eq!(
        v["payload"],
        json!({"prompt": "eyJtZXNzYWdlcyI6W119", "model": "m", "input_length": 15,
               "max_tokens": 64, "started_at": 1_700_000_000})
    );
    let back: InferenceRequest = serde_json::from_value(v).unwrap();
    assert_eq!(back, full);
    assert_eq!(back.diffs[0].to_diff().unwrap(), d);

    // Go writes a nil slice as null; missing fields are zero.
    let go: InferenceRequest = serde_json::from_str(r#"{"diffs":null,"nonce":7,"x":1}"#).unwrap();
    assert_eq!(go.diffs.len(), 0);
    assert_eq!(go.nonce, 7);
    assert!(go.payload.is_none() && go.stream.is_none());
}

#[test]
fn diff_json_conversions_and_errors() {
    let d = signed_diff(5);
    let j = DiffJson::from_diff(&d);
    assert_eq!(j.post_state_root, Some(vec![9; 32]));
    assert_eq!(j.to_diff().unwrap(), d);

    // Legacy diff without a root: the field is omitted and decodes back to empty.
    let mut legacy = d.clone();
    legacy.post_state_root.clear();
    let lj = DiffJson::from_diff(&legacy);
    let text = serde_json::to_string(&lj).unwrap();
    assert!(!text.contains("post_state_root"), "{text}");
    let parsed: DiffJson = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed.to_diff().unwrap(), legacy);

    let mismatch = DiffJson {
        nonce: 6,
        ..j.clone()
    };
    assert_eq!(
        mismatch.to_diff().unwrap_err(),
        WireError::NonceMismatch { outer: 6, inner: 5 }
    );
    let garbage = DiffJson {
        txs: vec![0xff, 0xff],
        ..j.clone()
    };
    assert!(matches!(garbage.to_diff(), Err(WireError::Proto { .. })));
    // The wire txs carry only fields 1-2, even though the signature covers all four.
    let inner = DiffContent::decode(j.txs.as_slice()).unwrap();
    assert!(inner.escrow_id.is_empty() && inner.post_state_root.is_empty());

    assert!(serde_json::from_str::<DiffJson>(r#"{"nonce":1,"txs":"%%%"}"#).is_err());
    assert!(serde_json::from_str::<DiffJson>(r#"{"nonce":1,"txs":"YWI"}"#).is_err());
}

#[test]
fn verify_timeout_shapes() {
    let req = VerifyTimeoutRequest {
        inference_id: 4,
        reason: "refused".into(),
        payload: None,
        diffs: None,
    };
    assert_eq!(
        serde_json::to_string(&req).unwrap(),
        r#"{"inference_id":4,"reason":"refused"}"#
    );
    let full = VerifyTimeoutRequest {
        payload: Some(payload()),
        diffs: Some(vec![DiffJson::from_diff(&signed_diff(1))]),
        ..req
    };
    let back: VerifyTimeoutRequest =
        serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
    assert_eq!(back, full);

    let resp = VerifyTimeoutResponse {
        accept: true,
        signature: Some(vec![1, 2, 3]),
        voter_slot: 2,
    };
    assert_eq!(
        serde_json::to_string(&resp).unwrap(),
        r#"{"accept":true,"signature":"AQID","voter_slot":2}"#
    );
    let reject: VerifyTimeoutResponse =
        serde_json::from_str(r#"{"accept":false,"signature":null,"voter_slot":0}"#).unwrap();
    assert_eq!(reject.signature, None);
    assert_eq!(
        serde_json::to_string(&reject).unwrap(),
        r#"{"accept":false,"voter_slot":0}"#
    );
}

#[test]
fn signatures_response_map_keys() {
    let parsed: SignaturesResponse =
        serde_json::from_str(r#"{"signatures":{"3":"AwQ=","0":"AQI="}}"#).unwrap();
    let want: BTreeMap<u32, Vec<u8>> = [(0, vec![1, 2]), (3, vec![3, 4])].into();
    assert_eq!(parsed.signatures, Some(want.clone()));
    assert_eq!(
        serde_json::to_string(&parsed).unwrap(),
        r#"{"signatures":{"0":"AQI=","3":"AwQ="}}"#
    );
    for empty in [r#"{"signatures":null}"#, "{}"] {
        let r: SignaturesResponse = serde_json::from_str(empty).unwrap();
        assert_eq!(r.signatures, None);
    }
    let none = SignaturesResponse { signatures: None };
    assert_eq!(
        serde_json::to_string(&none).unwrap(),
        r#"{"signatures":null}"#
    );
    assert!(serde_json::from_str::<SignaturesResponse>(r#"{"signatures":{"x":"AQI="}}"#).is_err());
}

#[test]
fn diff_records_and_mempool() {
    let d = signed_diff(2);
    let rec = DiffRecord {
        diff: DiffJson::from_diff(&d),
        state_hash: vec![9; 32],
    };
    let text = serde_json::to_string(&vec![rec.clone()]).unwrap();
    assert!(text.starts_with(r#"[{"diff":{"nonce":2,"#), "{text}");
    let back: Vec<DiffRecord> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, vec![rec]);

    let txs = vec![finalize_tx(), finalize_tx()];
    let m = MempoolResponse::from_txs(&txs);
    assert_eq!(
        serde_json::to_string(&m).unwrap(),
        r#"{"txs":["QgA=","QgA="]}"#
    );
    assert_eq!(m.decode_txs().unwrap(), txs);
    let null: MempoolResponse = serde_json::from_str(r#"{"txs":null}"#).unwrap();
    assert!(null.txs.is_empty());
    let bad = MempoolResponse {
        txs: vec![proto::encode(&txs[0]), vec![0xff]],
    };
    assert!(matches!(
        bad.decode_txs(),
        Err(WireError::Tx { index: 1, .. })
    ));
}

#[test]
fn receipt_and_meta_events() {
    let r = ReceiptEvent {
        devshard_receipt: ReceiptBody {
            state_sig: Some(vec![1]),
            state_hash: Some(vec![]),
            nonce: 4,
            receipt: None,
            confirmed_at: Some(17),
        },
    };
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        r#"{"devshard_receipt":{"state_sig":"AQ==","nonce":4,"confirmed_at":17}}"#
    );
    let parsed: ReceiptEvent = serde_json::from_str(
        r#"{"devshard_receipt":{"state_sig":"AQ==","state_hash":"","receipt":null,"nonce":4,"confirmed_at":17}}"#,
    )
    .unwrap();
    assert_eq!(parsed.devshard_receipt.state_hash, None);
    assert_eq!(parsed.devshard_receipt.state_sig, Some(vec![1]));

    let m: MetaEvent = serde_json::from_str(r#"{"devshard_meta":{"mempool":["QgA="]}}"#).unwrap();
    assert_eq!(m.devshard_meta.decode_txs().unwrap(), vec![finalize_tx()]);
}

#[test]
fn host_error_body() {
    let e: HostErrorBody = serde_json::from_str(r#"{"message":"sender not in group"}"#).unwrap();
    assert_eq!(e.message, "sender not in group");
    assert_eq!(
        serde_json::to_string(&e).unwrap(),
        r#"{"message":"sender not in group"}"#
    );
}
