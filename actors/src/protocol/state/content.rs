//! The signed byte strings of docs/protocol.md §2 that the state machine verifies, plus signing helpers
//! for the parties that produce them (executor/validator hosts in the simulator, the gateway when
//! it builds a ConfirmStart, tests).
//!
//! Every signature is `sign(m)` = recoverable ECDSA over `sha256(m)`; verification is always
//! recover-and-compare against the slot owner's address.

use crate::protocol::{
    crypto::{Signature, SigningKey},
    proto::{
        self, ExecutorReceiptContent, MsgFinishInference, MsgStartInference, MsgValidation,
        MsgValidationVote, StateSignatureContent, TimeoutReason, TimeoutVote, TimeoutVoteContent,
    },
};

use super::record::InferenceRecord;

/// The executor receipt preimage for a Start: the start fields, the escrow and the executor's
/// `confirmed_at`. `proto(...)` of it is what the executor signs.
pub fn receipt_content(
    start: &MsgStartInference,
    escrow_id: &str,
    confirmed_at: i64,
) -> ExecutorReceiptContent {
    ExecutorReceiptContent {
        inference_id: start.inference_id,
        prompt_hash: start.prompt_hash.clone(),
        model: start.model.clone(),
        input_length: start.input_length,
        max_tokens: start.max_tokens,
        started_at: start.started_at,
        escrow_id: escrow_id.to_string(),
        confirmed_at,
    }
}

/// The same preimage rebuilt from a stored record (what ConfirmStart verification uses).
pub(crate) fn record_receipt_content(
    rec: &InferenceRecord,
    escrow_id: &str,
    confirmed_at: i64,
) -> ExecutorReceiptContent {
    ExecutorReceiptContent {
        inference_id: rec.inference_id,
        prompt_hash: rec.prompt_hash.to_vec(),
        model: rec.model.to_string(),
        input_length: rec.input_length,
        max_tokens: rec.max_tokens,
        started_at: rec.started_at,
        escrow_id: escrow_id.to_string(),
        confirmed_at,
    }
}

/// The executor's receipt signature: `sign(proto(ExecutorReceiptContent))`.
pub fn sign_receipt(
    start: &MsgStartInference,
    escrow_id: &str,
    confirmed_at: i64,
    key: &SigningKey,
) -> Signature {
    key.sign(&proto::encode(&receipt_content(
        start,
        escrow_id,
        confirmed_at,
    )))
}

/// `proto(MsgFinishInference)` with `proposer_sig` cleared: the executor-signed bytes.
pub fn finish_unsigned_bytes(msg: &MsgFinishInference) -> Vec<u8> {
    proto::encode(&MsgFinishInference {
        proposer_sig: Vec::new(),
        ..msg.clone()
    })
}

/// `proto(MsgValidation)` with `proposer_sig` cleared: the validator-signed bytes.
pub fn validation_unsigned_bytes(msg: &MsgValidation) -> Vec<u8> {
    proto::encode(&MsgValidation {
        proposer_sig: Vec::new(),
        ..msg.clone()
    })
}

/// `proto(MsgValidationVote)` with `proposer_sig` cleared: the voter-signed bytes.
pub fn validation_vote_unsigned_bytes(msg: &MsgValidationVote) -> Vec<u8> {
    proto::encode(&MsgValidationVote {
        proposer_sig: Vec::new(),
        ..msg.clone()
    })
}

/// Returns `msg` with `proposer_sig` set by `key` (the executor).
pub fn sign_finish(msg: MsgFinishInference, key: &SigningKey) -> MsgFinishInference {
    let proposer_sig = key.sign(&finish_unsigned_bytes(&msg)).to_vec();
    MsgFinishInference {
        proposer_sig,
        ..msg
    }
}

/// Returns `msg` with `proposer_sig` set by `key` (the validator).
pub fn sign_validation(msg: MsgValidation, key: &SigningKey) -> MsgValidation {
    let proposer_sig = key.sign(&validation_unsigned_bytes(&msg)).to_vec();
    MsgValidation {
        proposer_sig,
        ..msg
    }
}

/// Returns `msg` with `proposer_sig` set by `key` (the voter).
pub fn sign_validation_vote(msg: MsgValidationVote, key: &SigningKey) -> MsgValidationVote {
    let proposer_sig = key.sign(&validation_vote_unsigned_bytes(&msg)).to_vec();
    MsgValidationVote {
        proposer_sig,
        ..msg
    }
}

/// `proto(TimeoutVoteContent{escrow_id, inference_id, reason, accept: true})`: what a verifier
/// signs when it supports a timeout claim.
pub fn timeout_vote_content(escrow_id: &str, inference_id: u64, reason: TimeoutReason) -> Vec<u8> {
    timeout_vote_content_with(escrow_id, inference_id, reason as i32, true)
}

/// The vote preimage with an explicit raw `reason` and `accept` (a vote's signature covers its
/// own `accept` flag).
pub fn timeout_vote_content_with(
    escrow_id: &str,
    inference_id: u64,
    reason: i32,
    accept: bool,
) -> Vec<u8> {
    proto::encode(&TimeoutVoteContent {
        escrow_id: escrow_id.to_string(),
        inference_id,
        reason,
        accept,
    })
}

/// An accepting timeout vote for `voter_slot`, signed by `key`.
pub fn sign_timeout_vote(
    escrow_id: &str,
    inference_id: u64,
    reason: TimeoutReason,
    voter_slot: u32,
    key: &SigningKey,
) -> TimeoutVote {
    let signature = key
        .sign(&timeout_vote_content(escrow_id, inference_id, reason))
        .to_vec();
    TimeoutVote {
        voter_slot,
        accept: true,
        signature,
    }
}

/// `proto(StateSignatureContent{state_root, escrow_id, nonce})`: a host's state attestation.
pub fn state_sig_content(state_root: &[u8], escrow_id: &str, nonce: u64) -> Vec<u8> {
    proto::encode(&StateSignatureContent {
        state_root: state_root.to_vec(),
        escrow_id: escrow_id.to_string(),
        nonce,
    })
}

/// A host's state signature over `state_sig_content`.
pub fn sign_state(state_root: &[u8], escrow_id: &str, nonce: u64, key: &SigningKey) -> Signature {
    key.sign(&state_sig_content(state_root, escrow_id, nonce))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::crypto::{recover_address, verify};

    #[test]
    fn finish_signature_covers_everything_but_the_sig() {
        let k = SigningKey::derive("content", 1);
        let m = sign_finish(
            MsgFinishInference {
                inference_id: 1,
                response_hash: vec![9; 32],
                input_tokens: 10,
                output_tokens: 5,
                executor_slot: 1,
                proposer_sig: Vec::new(),
                escrow_id: "42".into(),
            },
            &k,
        );
        verify(&finish_unsigned_bytes(&m), &m.proposer_sig, k.address()).unwrap();
        let other = MsgFinishInference {
            output_tokens: 6,
            ..m.clone()
        };
        assert!(verify(&finish_unsigned_bytes(&other), &m.proposer_sig, k.address()).is_err());
    }

    #[test]
    fn vote_and_state_contents_recover_to_the_signer() {
        let k = SigningKey::derive("content", 2);
        let v = sign_timeout_vote("42", 3, TimeoutReason::Execution, 4, &k);
        assert!(v.accept);
        let content = timeout_vote_content("42", 3, TimeoutReason::Execution);
        assert_eq!(
            recover_address(&content, &v.signature).unwrap(),
            *k.address()
        );
        assert_eq!(content, timeout_vote_content_with("42", 3, 2, true));
        let s = sign_state(&[0xab; 32], "42", 1, &k);
        verify(&state_sig_content(&[0xab; 32], "42", 1), &s, k.address()).unwrap();
    }
}
