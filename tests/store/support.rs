//! Helpers of the store tests: temporary directories and realistic diffs.

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicUsize, Ordering},
};

use devshard_actors::protocol::{
    crypto::SigningKey,
    diff::Diff,
    proto::{
        DevshardTx, MsgConfirmStart, MsgFinalizeRound, MsgFinishInference, MsgStartInference,
        MsgTimeoutInference, MsgValidation, TimeoutReason, TimeoutVote, Tx,
    },
};

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let unique = format!(
            "devshard-store-{name}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        TempDir(std::env::temp_dir().join(unique))
    }

    /// A database path inside a not-yet-existing subdirectory (the store creates it).
    pub fn db(&self) -> PathBuf {
        self.0.join("data").join("gateway.sqlite")
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A few transactions of different kinds, all fields depending on `nonce`.
pub fn txs(nonce: u64) -> Vec<DevshardTx> {
    let id = nonce.wrapping_mul(10);
    let b = |tag: u8| vec![tag, (nonce % 251) as u8, (nonce / 251 % 251) as u8, 0, 0xff];
    let mut txs = vec![
        DevshardTx::new(Tx::StartInference(MsgStartInference {
            inference_id: id,
            prompt_hash: b(1),
            model: format!("model-{}", nonce % 3),
            input_length: nonce.wrapping_add(100),
            max_tokens: 512,
            started_at: (nonce as i64).wrapping_add(1_700_000_000),
        })),
        DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
            inference_id: id,
            executor_sig: b(2),
            confirmed_at: (nonce as i64).wrapping_neg(),
        })),
    ];
    match nonce % 4 {
        0 => txs.push(DevshardTx::new(Tx::FinishInference(MsgFinishInference {
            inference_id: id.wrapping_sub(7),
            response_hash: b(3),
            input_tokens: nonce,
            output_tokens: nonce.wrapping_mul(2),
            executor_slot: (nonce % 16) as u32,
            proposer_sig: b(4),
            escrow_id: "42".into(),
        }))),
        1 => txs.push(DevshardTx::new(Tx::TimeoutInference(MsgTimeoutInference {
            inference_id: id.wrapping_sub(3),
            reason: TimeoutReason::Execution as i32,
            votes: vec![
                TimeoutVote {
                    voter_slot: 1,
                    accept: true,
                    signature: b(5),
                },
                TimeoutVote {
                    voter_slot: 2,
                    accept: false,
                    signature: vec![],
                },
            ],
        }))),
        2 => txs.push(DevshardTx::new(Tx::Validation(MsgValidation {
            inference_id: id.wrapping_sub(1),
            validator_slot: 3,
            valid: nonce % 8 == 2,
            proposer_sig: b(6),
            escrow_id: "42".into(),
        }))),
        _ => txs.push(DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {}))),
    }
    txs
}

/// A diff with realistic txs and deterministic pseudo-signature/root bytes (cheap to make).
pub fn diff(nonce: u64) -> Diff {
    let sig: Vec<u8> = (0..65u64)
        .map(|i| (nonce.wrapping_mul(31).wrapping_add(i) % 256) as u8)
        .collect();
    let root: Vec<u8> = (0..32u64)
        .map(|i| (nonce.wrapping_mul(7).wrapping_add(i * 3) % 256) as u8)
        .collect();
    Diff {
        nonce,
        txs: txs(nonce),
        user_sig: sig,
        post_state_root: root,
    }
}

/// A diff signed for real by `key` for `escrow_id`.
pub fn signed_diff(escrow_id: &str, nonce: u64, key: &SigningKey) -> Diff {
    let mut root = [0u8; 32];
    root[..8].copy_from_slice(&nonce.to_be_bytes());
    root[31] = 0xab;
    Diff::sign(nonce, txs(nonce), escrow_id, root, key)
}
