//! Adopting a live escrow from another gateway (docs/lifecycle.md §4, README "Adopting, deleting
//! and PoC routing"): the session is rebuilt from the diffs the hosts hold, never trusted.
//!
//! 1. [`fetch`]: every host of the group is asked `GET …/diffs` (pages of [`PAGE`]). A host
//!    that answers 404 holds nothing (an empty chain); one that cannot be reached is left out.
//! 2. [`verify`]: each host's diffs are checked in order on a fresh session of the escrow:
//!    nonces `1, 2, …` without a gap, `user_sig` recovering to the escrow's creator, every tx
//!    applying and the replayed root equal to the diff's `post_state_root`. The first diff
//!    that fails ends that host's chain; it and every later one are reported
//!    ([`RejectedDiff`], a typed [`RejectReason`]).
//! 3. [`choose`]: hosts **agree** with a chain when their own verified chain is a prefix of it
//!    or equal (compared by a running hash over the signed diffs). A host that served a
//!    rejected diff agrees with nothing, and one that could not be reached is not counted. The
//!    adopted chain is the longest verified chain whose agreeing hosts weigh at least the
//!    settlement quorum, `2·slots/3 + 1` slots (distinct addresses, with their slot counts):
//!    fewer hosts could never sign a settlement of it. None → [`AdoptError::NoQuorum`].
//! 4. [`persist`]: the adopted diffs (with the warm keys their replay bound) are appended to
//!    the store, and each host's sync nonce written, all acknowledged before the escrow is
//!    registered: durable before visible. The escrow actor then restores this log and resumes
//!    at the next nonce, catching each host up from what it holds.
//!
//! Pure decisions ([`choose`]) are separate from I/O ([`fetch`], [`persist`]).

mod choose;
mod fetch;
mod persist;
mod verify;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use serde::Serialize;

pub use choose::choose;
pub use fetch::{fetch, HostAnswer, PAGE};
pub use persist::persist;
pub use verify::verify;

use super::info::EscrowInfo;
use crate::{
    protocol::{crypto::Address, diff::Diff, warm::WarmKeyChecker},
    store::{StoreError, WarmDeltas},
};

/// Steps 1–3: asks every host (concurrently), verifies each answer, chooses the chain.
pub async fn rebuild(
    info: Arc<EscrowInfo>,
    warm: &WarmKeyChecker,
    timeout: Duration,
) -> Result<Adoption, AdoptError> {
    let asks = info.hosts.iter().map(|h| fetch(&info, h, timeout));
    let answers = futures::future::join_all(asks).await;
    let mut chains = Vec::with_capacity(answers.len());
    for (host, answer) in info.hosts.iter().zip(answers) {
        chains.push(verify(&info, &host.address, answer, warm).await);
    }
    let slots = u32::try_from(info.group_size()).unwrap_or(u32::MAX);
    choose(&info.escrow_id, chains, quorum_threshold(slots))
}

/// The settlement quorum over `slots` slots: `2·slots/3 + 1`.
pub fn quorum_threshold(slots: u32) -> u32 {
    slots.saturating_mul(2) / 3 + 1
}

/// Why a diff served by a host was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The record does not decode (txs proto, inner nonce).
    Undecodable,
    /// Not the next nonce of the host's chain (a gap, a repeat, out of order).
    NonceGap,
    /// `user_sig` does not recover to the escrow's creator.
    UserSig,
    /// One of its txs does not apply on the replayed state.
    TxFails,
    /// Its `post_state_root` is not the replayed root.
    RootMismatch,
    /// Served after a rejected diff of the same host: it cannot chain.
    AfterRejected,
}

impl RejectReason {
    /// Every variant (bounded metric label values).
    pub const ALL: [RejectReason; 6] = [
        RejectReason::Undecodable,
        RejectReason::NonceGap,
        RejectReason::UserSig,
        RejectReason::TxFails,
        RejectReason::RootMismatch,
        RejectReason::AfterRejected,
    ];

    /// The log field / metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Undecodable => "undecodable",
            RejectReason::NonceGap => "nonce_gap",
            RejectReason::UserSig => "user_sig",
            RejectReason::TxFails => "tx_fails",
            RejectReason::RootMismatch => "root_mismatch",
            RejectReason::AfterRejected => "after_rejected",
        }
    }
}

/// One diff a host served that was not accepted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RejectedDiff {
    pub host: Address,
    pub nonce: u64,
    pub reason: RejectReason,
    pub detail: String,
}

/// One host's verified chain.
#[derive(Debug, Clone)]
pub struct HostChain {
    pub host: Address,
    /// Slots the host holds in the group.
    pub weight: u32,
    /// False when the host could not be asked (then `error` says why).
    pub answered: bool,
    pub error: Option<String>,
    /// Verified diffs, nonces `1..=len`.
    pub diffs: Vec<Diff>,
    /// Warm keys the replay of those diffs bound, by nonce.
    pub warm: WarmDeltas,
    /// Running hash after each verified diff (`hashes[n-1]` covers nonces `1..=n`).
    pub hashes: Vec<[u8; 32]>,
    pub rejected: Vec<RejectedDiff>,
}

impl HostChain {
    /// A host not asked yet: nothing verified.
    pub fn new(host: Address, weight: u32) -> HostChain {
        HostChain {
            host,
            weight,
            answered: false,
            error: None,
            diffs: Vec::new(),
            warm: WarmDeltas::new(),
            hashes: Vec::new(),
            rejected: Vec::new(),
        }
    }

    /// Nonce of its last verified diff (0: none).
    pub fn verified_nonce(&self) -> u64 {
        u64::try_from(self.diffs.len()).unwrap_or(u64::MAX)
    }

    /// May this host count towards a quorum at all?
    fn may_agree(&self) -> bool {
        self.answered && self.rejected.is_empty()
    }

    /// Is its verified chain a prefix of `other`'s, or `other`'s of its own?
    fn compatible(&self, other: &HostChain) -> bool {
        let common = self.hashes.len().min(other.hashes.len());
        common == 0 || self.hashes.get(common - 1) == other.hashes.get(common - 1)
    }
}

/// What one host contributed, for the answer and the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostReport {
    pub host: Address,
    pub answered: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub verified_nonce: u64,
    pub rejected: usize,
    /// Counted in the quorum of the adopted chain.
    pub agrees: bool,
}

/// The adopted chain and what was learnt on the way.
#[derive(Debug, Clone)]
pub struct Adoption {
    pub escrow_id: String,
    pub diffs: Vec<Diff>,
    pub warm: WarmDeltas,
    /// Weight of the hosts that agree with it, and the quorum it had to reach.
    pub weight: u32,
    pub threshold: u32,
    pub hosts: Vec<HostReport>,
    pub rejected: Vec<RejectedDiff>,
    /// What each agreeing host holds (its catch-up starts after it).
    pub host_sync: BTreeMap<Address, u64>,
}

impl Adoption {
    /// The last adopted nonce (the escrow resumes at the next one).
    pub fn nonce(&self) -> u64 {
        u64::try_from(self.diffs.len()).unwrap_or(u64::MAX)
    }
}

/// Why an escrow cannot be adopted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdoptError {
    #[error(
        "no chain of diffs of escrow {escrow_id} is held by a quorum of its hosts: the best \
         agreement weighs {best} of the {threshold} slots needed ({rejected} diffs rejected, \
         {unreachable} hosts unreachable)"
    )]
    NoQuorum {
        escrow_id: String,
        best: u32,
        threshold: u32,
        rejected: usize,
        unreachable: usize,
        /// The rejected diffs, for the answer.
        report: Vec<RejectedDiff>,
    },
    #[error(
        "the store already holds a diff log for escrow {0} that the hosts' chain does not \
         extend (kept from an earlier registration): it cannot be adopted over it"
    )]
    StoreDiffers(String),
    #[error("escrow {0} cannot be rebuilt: {1}")]
    Session(String, String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
