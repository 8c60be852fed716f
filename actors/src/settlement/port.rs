//! What a settlement needs from its escrow: the steps that touch the protocol session. The
//! escrow implements them (it owns the session and the diff log); tests implement them over a
//! simulated session. Every step is idempotent against the escrow's durable log, so a step
//! re-run after a crash continues where the log stands.

use std::collections::BTreeMap;

use futures::future::LocalBoxFuture;

use crate::protocol::{
    crypto::Address,
    state::{Phase, StateMachine},
};

/// Why an escrow step could not complete now (retried with back-off).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("escrow is not ready: {0}")]
    NotReady(String),
    #[error("escrow step failed: {0}")]
    Failed(String),
    #[error("the escrow is gone")]
    Gone,
}

/// Where the session stands after one finalize round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundDone {
    pub nonce: u64,
    pub phase: Phase,
    /// Nonce of the MsgFinalizeRound diff (0 while Active).
    pub finalize_nonce: u64,
}

/// The session at Settlement and the state signatures the escrow holds for its final nonce.
#[derive(Debug, Clone)]
pub struct FinalState {
    pub state: StateMachine,
    pub signatures: BTreeMap<u32, Vec<u8>>,
}

/// The escrow side of a settlement.
pub trait EscrowSteps {
    /// Stops new requests; resolves once every running attempt ended and every unfinished
    /// nonce is settled (finish, or a timeout by vote).
    fn drain(&self) -> LocalBoxFuture<'static, Result<(), StepError>>;
    /// One diff round without inference, sent to its host with catch-up; the first round (the
    /// session is Active) carries MsgFinalizeRound.
    fn finalize_round(&self) -> LocalBoxFuture<'static, Result<RoundDone, StepError>>;
    /// The session (in Settlement) and its signatures of the latest nonce.
    fn final_state(&self) -> LocalBoxFuture<'static, Result<FinalState, StepError>>;
    /// Sends `host` every diff it lacks (admission-free), so it can sign the final nonce.
    fn catch_up(&self, host: Address) -> LocalBoxFuture<'static, Result<(), StepError>>;
    /// Asks the chain (through the escrow's grant cache) whether `validator` grants `warm`, so
    /// the next judgement of a final-state signature by `warm` is decided.
    fn check_warm_key(
        &self,
        validator: Address,
        warm: Address,
    ) -> LocalBoxFuture<'static, Result<(), StepError>>;
    /// `host` sent a final-state signature that does not verify (forged, wrong root, wrong
    /// key): it is charged like any invalid signature (`invalid_state_sig`, byzantine).
    fn charge_invalid_signature(
        &self,
        host: Address,
    ) -> LocalBoxFuture<'static, Result<(), StepError>>;
}
