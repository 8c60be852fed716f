//! Errors of the escrow's protocol session (`escrow::session`): protocol facts about hosts
//! (a state hash or signature that does not check out, a host ahead of us, a bad executor
//! receipt) and about our own state. Here, next to the state machine whose errors they wrap, so
//! that attribution (`policy/`) reads them without depending on the escrow.

use super::{crypto::Address, guard::Unreproducible, state::StateError};

/// Errors of the session layer (protocol facts about hosts and our own state).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    #[error("host state hash does not match local state (nonce {nonce})")]
    StateHashMismatch { nonce: u64 },
    /// The host's root differs for a reason we can name (`protocol/guard.rs`).
    #[error("host state root at nonce {nonce} cannot be reproduced: {reason}")]
    Unreproducible { nonce: u64, reason: Unreproducible },
    /// A host reports a root at a nonce whose diff left the in-memory window and was not read
    /// back (`escrow/session/window.rs`): it cannot be checked, so it is not taken.
    #[error("host reports nonce {nonce}, below the diff window and not recalled")]
    BeyondWindow { nonce: u64 },
    #[error("host reports nonce {host_nonce} beyond ours ({ours})")]
    HostAhead { host_nonce: u64, ours: u64 },
    #[error("invalid state signature: {0}")]
    InvalidStateSig(String),
    #[error("invalid executor receipt for nonce {nonce}: {reason}")]
    InvalidReceipt { nonce: u64, reason: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("stored diff {nonce} does not replay: {reason}")]
    Corrupt { nonce: u64, reason: String },
    #[error("escrow has no host for nonce {0}")]
    NoHost(u64),
    /// A warm key whose grant the chain has not confirmed yet (unreachable or slow): the
    /// gateway's problem, never the host's.
    #[error("warm key {warm} of {validator} is not verified yet")]
    WarmKeyUnresolved { validator: Address, warm: Address },
    /// An Active-phase diff at `nonce` would leave no room for the finalize round at the last
    /// active nonce (`escrow/nonce_room.rs`): not composed; its txs stay queued.
    #[error("diff at nonce {nonce} would pass the last active nonce {last_active} (kept for the finalize round)")]
    NonceLimit { nonce: u64, last_active: u64 },
}
