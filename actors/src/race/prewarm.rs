//! Signature recovery ahead of the escrow: when a host's receipt or its final mempool arrives, the
//! attempt (on its HTTP worker thread) recovers the signers of the state signature, the executor
//! receipt and the finish markers, which fills the process's recovery memo
//! ([`crate::protocol::recovered`]). The escrow then verifies exactly as before — nothing is
//! trusted because of this — but its own recoveries are memo hits, which takes most of the
//! per-request signature work off the escrow's single thread. Results are ignored here: a bad
//! signature is found (and attributed) by the escrow.

use crate::{
    escrow::messages::VerifyContext,
    protocol::{
        crypto,
        proto::{DevshardTx, Tx},
        state,
        wire::ReceiptBody,
    },
};

/// Recovers the state signature and the executor receipt of a receipt event.
pub(super) fn receipt(ctx: &VerifyContext, inference_nonce: u64, body: &ReceiptBody) {
    let hash = body.state_hash.as_deref().filter(|h| !h.is_empty());
    let sig = body.state_sig.as_deref().filter(|s| !s.is_empty());
    if let (Some(hash), Some(sig)) = (hash, sig) {
        let content = state::state_sig_content(hash, &ctx.escrow_id, body.nonce);
        let _ = crypto::recover_address(&content, sig);
    }
    let start = ctx
        .start
        .as_ref()
        .filter(|s| s.inference_id == inference_nonce);
    if let (Some(start), Some(receipt)) = (start, body.receipt.as_deref()) {
        let confirmed_at = body.confirmed_at.unwrap_or(0);
        let content = state::receipt_content(start, &ctx.escrow_id, confirmed_at);
        let _ = crypto::recover_address(&crate::protocol::proto::encode(&content), receipt);
    }
}

/// Recovers the proposers of the finish markers in a host's mempool.
pub(super) fn mempool(txs: &[DevshardTx]) {
    for tx in txs {
        if let Some(Tx::FinishInference(f)) = &tx.tx {
            let _ = crypto::recover_address(&state::finish_unsigned_bytes(f), &f.proposer_sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::protocol::{
        crypto::{sha256, SigningKey},
        proto::MsgStartInference,
        recovered,
    };

    #[test]
    fn a_receipt_event_leaves_both_signers_in_the_memo() {
        let host = SigningKey::from_bytes(&[9u8; 32]).unwrap();
        let start = MsgStartInference {
            inference_id: 5,
            prompt_hash: vec![1; 32],
            model: "m".into(),
            input_length: 3,
            max_tokens: 4,
            started_at: 1_700_000_123,
        };
        let hash = vec![7u8; 32];
        let state_sig = state::sign_state(&hash, "77", 5, &host).to_vec();
        let receipt = state::sign_receipt(&start, "77", 1_700_000_124, &host).to_vec();
        let body = ReceiptBody {
            state_sig: Some(state_sig.clone()),
            state_hash: Some(hash.clone()),
            nonce: 5,
            receipt: Some(receipt.clone()),
            confirmed_at: Some(1_700_000_124),
        };
        let ctx = VerifyContext {
            escrow_id: Arc::from("77"),
            start: Some(start.clone()),
        };
        receipt_digests_absent(&hash, &state_sig, &start, &receipt);
        super::receipt(&ctx, 5, &body);
        let state_digest = sha256(&state::state_sig_content(&hash, "77", 5));
        assert_eq!(
            recovered::lookup(state_digest, &state_sig),
            Some(host.address().clone())
        );
        let content = state::receipt_content(&start, "77", 1_700_000_124);
        let receipt_digest = sha256(&crate::protocol::proto::encode(&content));
        assert_eq!(
            recovered::lookup(receipt_digest, &receipt),
            Some(host.address().clone())
        );
    }

    fn receipt_digests_absent(
        hash: &[u8],
        state_sig: &[u8],
        start: &MsgStartInference,
        receipt: &[u8],
    ) {
        let state_digest = sha256(&state::state_sig_content(hash, "77", 5));
        assert_eq!(recovered::lookup(state_digest, state_sig), None);
        let content = state::receipt_content(start, "77", 1_700_000_124);
        let receipt_digest = sha256(&crate::protocol::proto::encode(&content));
        assert_eq!(recovered::lookup(receipt_digest, receipt), None);
    }
}
