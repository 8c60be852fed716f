//! Warm keys in the simulator (docs/lifecycle.md §5): hosts that sign with an operational key, the
//! chain's grants of those keys, the grants query, its control API and its faults.
//!
//! - [`WarmMode`] (`--warm-keys all|none|K`): hosts `0..K` get a warm key
//!   `SigningKey::derive("{seed}/warm", i)` and a grant from their validator address. Even hosts'
//!   grants are for `/inference.inference.MsgClaimRewards` (newer chains), odd hosts' for
//!   `/inference.inference.MsgStartInference` (older chains), so both type URLs are exercised.
//! - A warm host signs receipts, finish markers, validations, state signatures and timeout votes
//!   with its warm key; its identity (slots, routing) stays its cold address. The fault knob
//!   `sign_with_ungranted_key` makes it sign with a key nobody granted instead.
//! - [`WarmRegistry`] is the chain's grant table: `GET /productscience/inference/inference/
//!   grantees_by_message_type/{validator}/{type_url}` lists the live (not revoked, not expired)
//!   grantees; [`GrantsFault`] makes that endpoint unreachable (connection aborted), answer a
//!   status, or answer late. Every query is logged in the chain request log.
//! - Hosts resolve unbound warm keys against the same table in process ([`HostGrants`]) and bind
//!   them in their own state machines exactly as the gateway must, so a wrong gateway diverges.
//!
//! Control API (next to the chain API):
//!
//! | route | effect |
//! |---|---|
//! | `GET /sim/warm/grants` | every grant, with `active` |
//! | `POST /sim/warm/grants` | `{"host": i}` or `{"validator", "grantee", "type_url"?, "pub_key"?}`, optional `expires_in_ms` |
//! | `POST /sim/warm/grants/revoke` | `{"host": i}` or `{"validator", "grantee"}` — revokes every matching grant |
//! | `POST /sim/warm/grants/expire` | same selector, plus `in_ms` (default 0): expires them then |
//! | `GET/PUT/DELETE /sim/warm/faults` | [`GrantsFault`] of the grants endpoint |

use std::{
    str::FromStr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use serde::{Deserialize, Serialize};

use devshard_actors::{
    clock::SharedClock,
    protocol::{
        crypto::{Address, SigningKey},
        warm::{GrantAnswer, WarmKeyResolver, TYPE_URL_CLAIM_REWARDS, TYPE_URL_START_INFERENCE},
    },
};

use super::{chain::pubkey_b64, faults::Faults, host::HostState};

/// Chain REST path of the grants query, before `{validator}/{type_url}`.
pub(crate) const GRANTEES_PREFIX: &str =
    "/productscience/inference/inference/grantees_by_message_type/";

/// Which hosts sign with warm keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WarmMode {
    #[default]
    None,
    All,
    /// Hosts `0..K`.
    Count(usize),
}

impl WarmMode {
    /// Does host `index` of `hosts` use a warm key?
    pub fn covers(self, index: usize, hosts: usize) -> bool {
        match self {
            WarmMode::None => false,
            WarmMode::All => index < hosts,
            WarmMode::Count(k) => index < k.min(hosts),
        }
    }

    /// The `demo` default: about half the hosts, so both paths are always exercised.
    pub fn mixed(hosts: usize) -> WarmMode {
        WarmMode::Count(hosts.div_ceil(2))
    }
}

impl FromStr for WarmMode {
    type Err = String;

    fn from_str(s: &str) -> Result<WarmMode, String> {
        match s.trim() {
            "all" => Ok(WarmMode::All),
            "none" => Ok(WarmMode::None),
            n => n
                .parse::<usize>()
                .map(WarmMode::Count)
                .map_err(|_| format!("--warm-keys takes all, none or a host count, not {n:?}")),
        }
    }
}

/// Host `index`'s warm key.
pub fn warm_key(seed: &str, index: usize) -> SigningKey {
    SigningKey::derive(&format!("{seed}/warm"), index as u32)
}

/// The key host `index` signs with under `sign_with_ungranted_key` (never granted).
pub fn ungranted_key(seed: &str, index: usize) -> SigningKey {
    SigningKey::derive(&format!("{seed}/ungranted"), index as u32)
}

/// The grant type a warm host's default grant uses.
pub fn default_type_url(index: usize) -> &'static str {
    if index.is_multiple_of(2) {
        TYPE_URL_CLAIM_REWARDS
    } else {
        TYPE_URL_START_INFERENCE
    }
}

/// One authz grant: `validator` lets `grantee` act for it for `type_url`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Grant {
    pub validator: Address,
    pub grantee: Address,
    pub pub_key: String,
    pub type_url: String,
    pub expires_at_ms: Option<i64>,
    pub revoked: bool,
}

impl Grant {
    pub(super) fn active(&self, now_ms: i64) -> bool {
        !self.revoked && self.expires_at_ms.is_none_or(|t| now_ms < t)
    }
}

/// Faults of the grants endpoint only (the rest of the chain API is unaffected).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrantsFault {
    /// The connection is aborted before any answer.
    pub unreachable: bool,
    /// Answer this status with `{"code": 14, "message": "unavailable"}`.
    pub status: Option<u16>,
    /// Answer this much later.
    pub delay_ms: Option<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    grants: Vec<Grant>,
    fault: GrantsFault,
}

/// The chain's grant table.
#[derive(Debug)]
pub(crate) struct WarmRegistry {
    clock: SharedClock,
    inner: Mutex<Inner>,
}

impl WarmRegistry {
    pub(crate) fn new(clock: SharedClock, grants: Vec<Grant>) -> WarmRegistry {
        WarmRegistry {
            clock,
            inner: Mutex::new(Inner {
                grants,
                fault: GrantsFault::default(),
            }),
        }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Live grantees of `validator` for `type_url`.
    pub(crate) fn grantees(&self, validator: &Address, type_url: &str) -> Vec<Grant> {
        let now = self.clock.now_ms();
        self.lock()
            .grants
            .iter()
            .filter(|g| &g.validator == validator && g.type_url == type_url && g.active(now))
            .cloned()
            .collect()
    }

    /// Does `validator` grant `warm` anything live now?
    pub(crate) fn is_granted(&self, validator: &Address, warm: &Address) -> bool {
        let now = self.clock.now_ms();
        self.lock()
            .grants
            .iter()
            .any(|g| &g.validator == validator && &g.grantee == warm && g.active(now))
    }

    pub(crate) fn all(&self) -> Vec<Grant> {
        self.lock().grants.clone()
    }

    pub(crate) fn add(&self, grant: Grant) {
        self.lock().grants.push(grant);
    }

    /// Revokes every grant of `validator` to `grantee`; returns how many.
    pub(crate) fn revoke(&self, validator: &Address, grantee: &Address) -> usize {
        self.update(validator, grantee, |g| g.revoked = true)
    }

    /// Makes every grant of `validator` to `grantee` expire `in_ms` from now.
    pub(crate) fn expire(&self, validator: &Address, grantee: &Address, in_ms: u64) -> usize {
        let at = self
            .clock
            .now_ms()
            .saturating_add(i64::try_from(in_ms).unwrap_or(i64::MAX));
        self.update(validator, grantee, |g| g.expires_at_ms = Some(at))
    }

    fn update(&self, validator: &Address, grantee: &Address, f: impl Fn(&mut Grant)) -> usize {
        let mut inner = self.lock();
        let mut n = 0;
        for g in inner
            .grants
            .iter_mut()
            .filter(|g| &g.validator == validator && &g.grantee == grantee)
        {
            f(g);
            n += 1;
        }
        n
    }

    pub(crate) fn fault(&self) -> GrantsFault {
        self.lock().fault.clone()
    }

    pub(crate) fn set_fault(&self, fault: GrantsFault) {
        self.lock().fault = fault;
    }
}

/// A host's step 4: the chain's grant table, in process.
#[derive(Debug)]
pub(crate) struct HostGrants(pub(crate) Arc<WarmRegistry>);

impl WarmKeyResolver for HostGrants {
    fn resolve(&self, validator: &Address, warm: &Address) -> GrantAnswer {
        if self.0.is_granted(validator, warm) {
            GrantAnswer::Granted
        } else {
            GrantAnswer::NotGranted
        }
    }
}

/// The default grants of a network: one per warm host, from its validator address.
pub(crate) fn default_grants(mode: WarmMode, seed: &str, hosts: &[(Address, usize)]) -> Vec<Grant> {
    hosts
        .iter()
        .filter(|(_, i)| mode.covers(*i, hosts.len()))
        .map(|(validator, i)| {
            let key = warm_key(seed, *i);
            Grant {
                validator: validator.clone(),
                grantee: key.address().clone(),
                pub_key: pubkey_b64(&key.public_key().serialize()),
                type_url: default_type_url(*i).to_owned(),
                expires_at_ms: None,
                revoked: false,
            }
        })
        .collect()
}

impl HostState {
    /// Makes the host sign with `key` (its identity stays the cold key).
    pub(crate) fn with_warm_key(mut self, key: Option<SigningKey>) -> HostState {
        self.warm_key = key;
        self
    }

    /// The key this host signs protocol messages with under `faults`: a key nobody granted
    /// (`sign_with_ungranted_key`), else its warm key, else its cold key.
    pub(crate) fn signer<'a>(&'a self, faults: &Faults) -> &'a SigningKey {
        if faults.sign_with_ungranted_key {
            &self.ungranted_key
        } else {
            self.warm_key.as_ref().unwrap_or(&self.key)
        }
    }
}
