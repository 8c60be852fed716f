//! A signed diff: one nonce's transactions, the post-state root and the creator's signature
//! (docs/protocol.md §4.2).

use super::{
    crypto::{self, Address, CryptoError, SigningKey},
    proto::{self, DevshardTx, DiffContent},
};

/// One sequenced step of an escrow session.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    pub nonce: u64,
    pub txs: Vec<DevshardTx>,
    /// `sign(proto(DiffContent{nonce, txs, escrow_id, post_state_root}))` by the escrow creator.
    pub user_sig: Vec<u8>,
    /// State root after the txs and the per-nonce fee (32 bytes; empty only on legacy wire data).
    pub post_state_root: Vec<u8>,
}

impl Diff {
    /// Composes and signs a diff. The signature's recovery is remembered
    /// ([`SigningKey::sign_remembered`]): the cost ledger verifies it again when it replays the
    /// log.
    pub fn sign(
        nonce: u64,
        txs: Vec<DevshardTx>,
        escrow_id: &str,
        post_state_root: [u8; 32],
        key: &SigningKey,
    ) -> Diff {
        let mut d = Diff {
            nonce,
            txs,
            user_sig: Vec::new(),
            post_state_root: post_state_root.to_vec(),
        };
        d.user_sig = key.sign_remembered(&d.signed_content(escrow_id)).to_vec();
        d
    }

    /// The bytes the creator signs: all four `DiffContent` fields.
    pub fn signed_content(&self, escrow_id: &str) -> Vec<u8> {
        proto::encode(&DiffContent {
            nonce: self.nonce,
            txs: self.txs.clone(),
            escrow_id: escrow_id.to_string(),
            post_state_root: self.post_state_root.clone(),
        })
    }

    /// The bytes that travel in `DiffJSON.txs`: `DiffContent` with only fields 1–2 set.
    pub fn wire_txs(&self) -> Vec<u8> {
        proto::encode(&DiffContent {
            nonce: self.nonce,
            txs: self.txs.clone(),
            escrow_id: String::new(),
            post_state_root: Vec::new(),
        })
    }

    /// Recover-and-compare of `user_sig` against the escrow creator.
    pub fn verify_user_sig(&self, escrow_id: &str, creator: &Address) -> Result<(), CryptoError> {
        crypto::verify(&self.signed_content(escrow_id), &self.user_sig, creator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_diff_verifies_and_rejects_other_escrow() {
        let k = SigningKey::derive("diff", 0);
        let d = Diff::sign(1, vec![], "42", [7u8; 32], &k);
        d.verify_user_sig("42", k.address()).unwrap();
        assert!(d.verify_user_sig("43", k.address()).is_err());
    }

    #[test]
    fn a_signed_diff_s_user_signature_is_remembered_for_its_replay() {
        let k = SigningKey::derive("diff", 1);
        let d = Diff::sign(9, vec![], "42", [3u8; 32], &k);
        let digest = crypto::sha256(&d.signed_content("42"));
        assert_eq!(
            crate::protocol::recovered::lookup(digest, &d.user_sig),
            Some(k.address().clone())
        );
    }
}
