//! Encoding `POST …/chat/completions` bodies from diffs encoded once.
//!
//! Under load a host may lag many nonces behind (its sync nonce moves only when its receipt
//! arrives), and every request to it re-sends all the diffs it has not acknowledged: re-encoding
//! each of them (protobuf, base64, JSON escaping) for every request made the escrow's thread the
//! bottleneck at a few hundred concurrent streams. [`encode_diff`] encodes a diff once;
//! [`encode_inference_request`] splices encoded diffs into a body, byte for byte what `serde_json`
//! writes for the equivalent [`InferenceRequest`] (tested).

use bytes::Bytes;

use super::{DiffJson, PayloadJson};
use crate::protocol::diff::Diff;

/// One diff as its wire JSON object.
pub fn encode_diff(diff: &Diff) -> Result<Bytes, serde_json::Error> {
    serde_json::to_vec(&DiffJson::from_diff(diff)).map(Bytes::from)
}

/// The JSON of `InferenceRequest { diffs, nonce, payload, stream: None }` from diffs already
/// encoded with [`encode_diff`].
pub fn encode_inference_request(
    diffs: &[Bytes],
    nonce: u64,
    payload: Option<&PayloadJson>,
) -> Result<Vec<u8>, serde_json::Error> {
    let payload = payload.map(serde_json::to_vec).transpose()?;
    let size = diffs.iter().map(|d| d.len() + 1).sum::<usize>()
        + payload.as_ref().map_or(0, Vec::len)
        + 48;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(b"{\"diffs\":[");
    for (i, d) in diffs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(d);
    }
    out.extend_from_slice(b"],\"nonce\":");
    out.extend_from_slice(nonce.to_string().as_bytes());
    if let Some(p) = payload {
        out.extend_from_slice(b",\"payload\":");
        out.extend_from_slice(&p);
    }
    out.push(b'}');
    Ok(out)
}

/// The same body through `serde_json` (the reference the tests compare against).
#[cfg(test)]
pub(crate) fn encode_inference_request_slow(
    diffs: &[&Diff],
    nonce: u64,
    payload: Option<PayloadJson>,
) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&super::InferenceRequest {
        diffs: diffs.iter().map(|d| DiffJson::from_diff(d)).collect(),
        nonce,
        payload,
        stream: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{
        crypto::SigningKey,
        proto::{DevshardTx, MsgStartInference, Tx},
    };

    fn diff(nonce: u64, key: &SigningKey) -> Diff {
        let start = Tx::StartInference(MsgStartInference {
            inference_id: nonce,
            prompt_hash: vec![nonce as u8; 32],
            model: "m\"odel\\".into(),
            input_length: 12,
            max_tokens: 34,
            started_at: 1_700_000_000,
        });
        Diff::sign(nonce, vec![DevshardTx::new(start)], "42", [9; 32], key)
    }

    #[test]
    fn spliced_bodies_are_byte_for_byte_what_serde_writes() {
        let key = SigningKey::from_bytes(&[3u8; 32]).unwrap();
        let diffs: Vec<Diff> = (1..=4).map(|n| diff(n, &key)).collect();
        let payload = PayloadJson {
            prompt: br#"{"messages":[{"role":"user","content":"hi \"there\""}]}"#.to_vec(),
            model: "m".into(),
            input_length: 52,
            max_tokens: 16,
            started_at: 1_700_000_001,
        };
        let encoded: Vec<Bytes> = diffs.iter().map(|d| encode_diff(d).unwrap()).collect();
        let refs: Vec<&Diff> = diffs.iter().collect();
        for (n, payload) in [(4, Some(payload.clone())), (3, None)] {
            let fast = encode_inference_request(&encoded[..n], n as u64, payload.as_ref()).unwrap();
            let slow = encode_inference_request_slow(&refs[..n], n as u64, payload).unwrap();
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(slow).unwrap()
            );
        }
        let empty = encode_inference_request(&[], 7, None).unwrap();
        assert_eq!(empty, encode_inference_request_slow(&[], 7, None).unwrap());
        let back: crate::protocol::wire::InferenceRequest = serde_json::from_slice(&empty).unwrap();
        assert_eq!(back.nonce, 7);
    }
}
