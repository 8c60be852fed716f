//! Errors of the state machine. Display texts start with the upstream sentinel texts
//! (`types/errors.go`, PROTOCOL.md §7) so hosts answer HTTP 500 bodies that the gateway (ours or
//! upstream's) classifies by substring, e.g. `invalid nonce: must be sequential: expected M, got N`.

/// Why a diff or a transaction was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// `ErrInvalidNonce`: the diff nonce is not `latest + 1`.
    #[error("invalid nonce: must be sequential: expected {expected}, got {got}")]
    InvalidNonce { expected: u64, got: u64 },
    /// `ErrInvalidUserSig`: `user_sig` does not recover to the escrow creator.
    #[error("invalid user signature: {0}")]
    InvalidUserSig(String),
    /// `ErrInvalidProposerSig`: a host-proposed tx is not signed by the expected slot owner.
    #[error("invalid proposer signature: not a group member: {0}")]
    InvalidProposerSig(String),
    /// `ErrInvalidExecutorSig`: the ConfirmStart receipt is not signed by the executor.
    #[error("invalid executor signature: {0}")]
    InvalidExecutorSig(String),
    /// `ErrInsufficientBalance`: a reserve, the per-nonce fee or the creation fee exceeds the
    /// balance.
    #[error("insufficient escrow balance")]
    InsufficientBalance,
    /// `ErrMultipleStartMsgs`.
    #[error("at most one MsgStartInference per diff")]
    MultipleStartMsgs,
    /// `ErrSessionFinalizing`: Start outside the Active phase.
    #[error("session is finalizing: no new inferences")]
    SessionFinalizing,
    /// `ErrInferenceNotFound`: not a live record (never started, or already sealed).
    #[error("inference not found: inference {0}")]
    InferenceNotFound(u64),
    /// `ErrInvalidTransition`: the record is in the wrong status for this tx.
    #[error("invalid status transition: {0}")]
    InvalidTransition(String),
    /// `ErrSelfValidation`: the executor's address validating or voting on its own inference.
    #[error("validator cannot be the executor")]
    SelfValidation,
    /// `ErrWrongExecutorSlot`: MsgFinishInference names another slot than the record.
    #[error("executor_slot does not match assigned executor: expected {expected}, got {got}")]
    WrongExecutorSlot { expected: u32, got: u32 },
    /// `ErrInsufficientVotes`: accept weight not strictly above `vote_threshold`.
    #[error("insufficient votes for timeout: need >{threshold} accept votes, got {got}")]
    InsufficientVotes { threshold: u32, got: u32 },
    /// `ErrInvalidTimeoutReason`: reason is neither REFUSED nor EXECUTION.
    #[error("timeout reason does not match inference status: unknown reason {0}")]
    InvalidTimeoutReason(i32),
    /// `ErrDuplicateVote`: an address voted twice.
    #[error("duplicate vote from slot {0}")]
    DuplicateVote(String),
    /// `ErrAlreadyFinalizing`: MsgFinalizeRound outside the Active phase.
    #[error("session is already finalizing")]
    AlreadyFinalizing,
    /// `ErrEmptyTx`: a `DevshardTx` with no member set.
    #[error("devshard tx has no message set")]
    EmptyTx,
    /// `ErrDuplicateInferenceID`.
    #[error("duplicate inference ID")]
    DuplicateInferenceID,
    /// `ErrInvalidVoteSig`: a timeout vote does not recover to its slot owner, or comes from the
    /// executor's address.
    #[error("invalid vote signature: {0}")]
    InvalidVoteSig(String),
    /// `ErrInvalidInferenceID`.
    #[error("inference_id must equal diff nonce")]
    InvalidInferenceID,
    /// `ErrPostStateRootMismatch`: the recomputed root differs from the diff's (hex of both).
    #[error(
        "post_state_root does not match computed state root: diff {diff}, computed {computed}"
    )]
    PostStateRootMismatch { diff: String, computed: String },
    /// `ErrEscrowIDMismatch`: a host-proposed tx signed for another escrow.
    #[error("escrow_id does not match session: expected {expected}, got {got}")]
    EscrowIDMismatch { expected: String, got: String },
    /// `ErrSlotNotInGroup`: a slot id outside `0..N`.
    #[error("slot not in group: slot {0}")]
    SlotNotInGroup(u32),
    /// `ErrCostOverflow`: `(a + b) * token_price` overflows u64.
    #[error("cost calculation overflows uint64")]
    CostOverflow,
    /// A balance, fee or counter update would overflow.
    #[error("arithmetic overflow: {0}")]
    Overflow(&'static str),
    /// A warm key's grant could not be checked yet (the chain did not answer): the tx waits. Only
    /// a gateway-side state machine with a cache resolver produces it; never a host fault.
    #[error("warm key {address} of slot {slot} is not verified yet")]
    WarmKeyUnresolved { slot: u32, address: String },
    /// `ErrInvalidGroup`: slot ids are not exactly `0..N-1` or N is not in `1..=128`.
    #[error("invalid group: {0}")]
    InvalidGroup(String),
}

impl StateError {
    /// `state.IsPostStateRootMismatchError`: the host computed another root for this diff.
    pub fn is_post_state_root_mismatch(&self) -> bool {
        matches!(self, StateError::PostStateRootMismatch { .. })
    }

    /// The diff nonce was not `latest + 1` (a gap or a replay).
    pub fn is_invalid_nonce(&self) -> bool {
        matches!(self, StateError::InvalidNonce { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_match_upstream_sentinels() {
        let e = StateError::InvalidNonce {
            expected: 4,
            got: 6,
        };
        assert_eq!(
            e.to_string(),
            "invalid nonce: must be sequential: expected 4, got 6"
        );
        assert!(e.is_invalid_nonce() && !e.is_post_state_root_mismatch());
        let e = StateError::PostStateRootMismatch {
            diff: "ab".into(),
            computed: "cd".into(),
        };
        assert_eq!(
            e.to_string(),
            "post_state_root does not match computed state root: diff ab, computed cd"
        );
        assert!(e.is_post_state_root_mismatch());
        assert_eq!(
            StateError::InsufficientBalance.to_string(),
            "insufficient escrow balance"
        );
        assert_eq!(
            StateError::InvalidInferenceID.to_string(),
            "inference_id must equal diff nonce"
        );
    }
}
