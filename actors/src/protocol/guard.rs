//! The protocol version guard: when a host's state root differs from ours, can we *name* why?
//!
//! A root we cannot reproduce is normally a divergence (a host that forked or lied), answered by
//! the repair loop. But some mismatches have a reason we can compute from our own state:
//! - the host hashes another version tag into the root (`sha256(tag)` in docs/protocol.md §5.4): it
//!   runs another protocol version (docs/versions.md), which no repair can fix;
//! - the host's `rest_hash` leaves the warm-key bindings out (`warm_keys_hash = sha256("")`): it
//!   does not implement warm keys (docs/lifecycle.md §5), or a composition of `rest_hash` we do not
//!   implement.
//!
//! [`explain`] recomputes the candidate roots from our state's public parts and returns the
//! reason, or `None` when the mismatch is unexplained (then it is a divergence).

use std::fmt;

use sha2::{Digest, Sha256};

use super::{
    crypto::sha256,
    state::{compose_root, StateMachine},
};

/// Version tags upstream has used (docs/versions.md).
pub const KNOWN_VERSION_TAGS: [&str; 7] = ["v1", "v2", "v3", "v4", "v4.1", "v5", "v6"];

/// Why a host's root cannot be reproduced, when we can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unreproducible {
    /// The host's root is our state under another version tag.
    OtherVersion {
        host: &'static str,
        ours: &'static str,
    },
    /// The host's root is our state with no warm-key binding: it does not bind warm keys.
    NoWarmKeys,
}

impl Unreproducible {
    /// Bounded label for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Unreproducible::OtherVersion { .. } => "unsupported_protocol_version",
            Unreproducible::NoWarmKeys => "unsupported_rest_hash_composition",
        }
    }
}

impl fmt::Display for Unreproducible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreproducible::OtherVersion { host, ours } => write!(
                f,
                "unsupported protocol version: the host hashes tag {host:?} into its state root, this escrow speaks {ours:?}"
            ),
            Unreproducible::NoWarmKeys => f.write_str(
                "unsupported rest_hash composition: the host leaves the warm-key bindings out of its state root",
            ),
        }
    }
}

/// Why `host_root` at `nonce` differs from our root, if a known reason explains it. Only our
/// latest nonce can be explained (older states are not kept).
pub fn explain(sm: &StateMachine, nonce: u64, host_root: &[u8]) -> Option<Unreproducible> {
    if nonce != sm.latest_nonce() || host_root == sm.state_root().as_slice() {
        return None;
    }
    let stats = sm.host_stats_hash();
    let rest = sm.rest_hash();
    let version = sm.config().protocol;
    let ours = version.root_tag();
    for tag in KNOWN_VERSION_TAGS {
        if tag != ours && tagged_root(&stats, sm.fees(), &rest, tag, sm) == host_root {
            return Some(Unreproducible::OtherVersion { host: tag, ours });
        }
    }
    if !sm.warm_keys().is_empty() {
        let mut h = Sha256::new();
        h.update(sm.balance().to_be_bytes());
        h.update(sm.inferences_hash());
        h.update(sha256(b""));
        let bare: [u8; 32] = h.finalize().into();
        if compose_root(&stats, sm.fees(), &bare, version, sm.phase()) == host_root {
            return Some(Unreproducible::NoWarmKeys);
        }
    }
    None
}

fn tagged_root(
    stats: &[u8; 32],
    fees: u64,
    rest: &[u8; 32],
    tag: &str,
    sm: &StateMachine,
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(stats);
    h.update(fees.to_be_bytes());
    h.update(rest);
    h.update(sha256(tag.as_bytes()));
    h.update([sm.phase().as_u8()]);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{
        crypto::{Address, SigningKey},
        state::{SessionConfig, Slot},
        warm::WarmBinding,
    };

    fn machine() -> StateMachine {
        let group = (0..3)
            .map(|i| Slot {
                slot_id: i,
                validator: SigningKey::derive("guard", i).address().clone(),
            })
            .collect();
        let mut sm =
            StateMachine::new("42", SessionConfig::default_for_group(3), group, 1_000_000).unwrap();
        sm.apply_best_effort(1, vec![]).unwrap();
        sm
    }

    #[test]
    fn another_version_tag_is_named() {
        let sm = machine();
        let v41 = tagged_root(
            &sm.host_stats_hash(),
            sm.fees(),
            &sm.rest_hash(),
            "v4.1",
            &sm,
        );
        assert_eq!(
            explain(&sm, 1, &v41),
            Some(Unreproducible::OtherVersion {
                host: "v4.1",
                ours: "v2"
            })
        );
        assert!(explain(&sm, 1, &v41)
            .unwrap()
            .to_string()
            .starts_with("unsupported protocol version"));
        // Our own root, an older nonce or a random root: nothing to name.
        assert_eq!(explain(&sm, 1, &sm.state_root()), None);
        assert_eq!(explain(&sm, 0, &v41), None);
        assert_eq!(explain(&sm, 1, &[7u8; 32]), None);
    }

    #[test]
    fn a_host_without_warm_keys_is_named() {
        let mut sm = machine();
        let before = sm.state_root();
        sm.inject_warm_keys(&[WarmBinding {
            slot: 1,
            address: Address::unchecked("gonka1warm"),
        }])
        .unwrap();
        assert_ne!(sm.state_root(), before);
        assert_eq!(explain(&sm, 1, &before), Some(Unreproducible::NoWarmKeys));
    }
}
