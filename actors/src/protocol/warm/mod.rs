//! Warm keys (LIFECYCLE.md §5): hosts that sign with an operational key the chain authorizes for
//! their validator, instead of the validator's cold key.
//!
//! # The one rule
//! [`decide`] answers "may `recovered` sign for slot `s` of validator `v`?" in the order of §5:
//! 1. `v`'s cold key;
//! 2. the warm key bound to slot `s` in the state (a bound slot is exclusive: any other warm key
//!    is rejected without asking the chain);
//! 3. a warm key bound to another slot of `v` (accepted, binds nothing);
//! 4. a live chain check through a [`WarmKeyResolver`].
//!
//! Steps 1–3 read consensus state only, so every replica answers alike. Step 4 is the only one
//! that can consult the chain; on the apply path its "yes" binds the key to the slot
//! (`state/warm.rs`), which is how the decision becomes reproducible state.
//!
//! # Layout
//! - `decide.rs`  — [`decide`], [`Acceptance`], [`Rejection`] (pure).
//! - `hash.rs`    — [`warm_keys_hash`], [`WarmBinding`] and deltas.
//! - `cache.rs`   — [`GrantCache`]: positive answers forever, negative ones bounded and expiring;
//!   the synchronous resolver the gateway's state machine uses.
//! - `grants.rs`  — [`GrantsSource`] and [`RestGrants`], the chain query over awc.
//! - `checker.rs` — [`WarmKeyChecker`]: cache + chain query + metrics + log stages.

mod cache;
mod checker;
mod decide;
mod grants;
mod hash;
mod metrics;

use std::{fmt, sync::Arc};

use super::crypto::Address;

pub use cache::{GrantCache, NEGATIVE_CAPACITY, NEGATIVE_TTL_MS};
pub use checker::{CheckOutcome, WarmKeyChecker};
pub use decide::{decide, Acceptance, Rejection};
pub use grants::{
    grantees_path, parse_grantees, GrantsError, GrantsSource, RestGrants, GRANTS_TIMEOUT,
};
pub use hash::{warm_delta, warm_keys_hash, WarmBinding};
pub use metrics::WarmKeyMetrics;

/// Marker message type of warm-key grants on newer chains.
pub const TYPE_URL_CLAIM_REWARDS: &str = "/inference.inference.MsgClaimRewards";
/// Marker message type of warm-key grants on older chains.
pub const TYPE_URL_START_INFERENCE: &str = "/inference.inference.MsgStartInference";
/// Both marker types, in the order they are queried.
pub const GRANT_TYPE_URLS: [&str; 2] = [TYPE_URL_CLAIM_REWARDS, TYPE_URL_START_INFERENCE];

/// What the chain (or what we know of it) says about `warm` acting for `validator`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantAnswer {
    Granted,
    NotGranted,
    /// Not known now (no cached answer, the chain is unreachable or slow): decide later.
    Unknown,
}

/// Step 4 of [`decide`]: the chain's answer, synchronously (from a cache or an in-process chain).
pub trait WarmKeyResolver: Send + Sync + fmt::Debug {
    fn resolve(&self, validator: &Address, warm: &Address) -> GrantAnswer;
}

/// A resolver that knows no grant: only cold keys and keys already bound are accepted.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoGrants;

impl WarmKeyResolver for NoGrants {
    fn resolve(&self, _validator: &Address, _warm: &Address) -> GrantAnswer {
        GrantAnswer::NotGranted
    }
}

/// A shared resolver.
pub type SharedResolver = Arc<dyn WarmKeyResolver>;
