//! State signatures of the final root and their weight (docs/protocol.md §5.7, docs/lifecycle.md §1).
//!
//! A signature counts only after it verified against `StateSignatureContent{root, escrow, nonce}`
//! and the slot's owner — its cold key, or a warm key the session binds or the chain grants
//! (docs/lifecycle.md §5). The weight counts each distinct validator address once, with its slot
//! count; the quorum is `2·slots/3 + 1`. Pure functions, unit-tested without a runtime.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::protocol::{
    crypto::{recover_address, Address, CryptoError},
    state::{state_sig_content, Slot},
    warm::Acceptance,
};

/// Why a fetched signature is not counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRejected {
    #[error("slot {0} is not in the group")]
    UnknownSlot(u32),
    #[error("signature of slot {slot} does not verify: {reason}")]
    Invalid { slot: u32, reason: CryptoError },
    /// A warm key whose grant the chain has not answered yet: never the host's fault.
    #[error("signature of slot {slot} is by warm key {warm}, whose grant is not known yet")]
    Unresolved {
        slot: u32,
        validator: Address,
        warm: Address,
    },
}

impl SignatureRejected {
    /// A verified fault of the host (charged like any invalid signature).
    pub fn is_host_fault(&self) -> bool {
        !matches!(self, SignatureRejected::Unresolved { .. })
    }

    /// Bounded label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SignatureRejected::UnknownSlot(_) => "unknown_slot",
            SignatureRejected::Invalid {
                reason: CryptoError::WrongSigner { .. },
                ..
            } => "wrong_signer",
            SignatureRejected::Invalid { .. } => "malformed",
            SignatureRejected::Unresolved { .. } => "warm_key_unresolved",
        }
    }
}

/// Which key made an accepted signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignerKey {
    /// The validator's cold key.
    Cold,
    /// A warm key the state binds to the validator, or one the chain grants.
    Warm,
}

impl SignerKey {
    pub fn label(self) -> &'static str {
        match self {
            SignerKey::Cold => "cold",
            SignerKey::Warm => "warm",
        }
    }
}

/// An accepted state signature: the slot's validator (whose slots it counts for) and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub validator: Address,
    pub key: SignerKey,
}

/// The quorum threshold of a group of `slots` slots: `2·slots/3 + 1`.
pub fn threshold(slots: usize) -> u32 {
    let n = u32::try_from(slots).unwrap_or(u32::MAX);
    (2 * n / 3).saturating_add(1)
}

/// Accepts a state signature of `slot` over `root` at `nonce`: the signer must be the slot's
/// validator's cold key or a warm key `acceptance(validator, recovered)` accepts — the
/// docs/lifecycle.md §5 rule, which the caller runs with the session's bindings and grant cache
/// ([`StateMachine::address_acceptance`](crate::protocol::state::StateMachine::address_acceptance)).
pub fn accept_state_signature(
    group: &[Slot],
    escrow_id: &str,
    (root, nonce): (&[u8], u64),
    slot: u32,
    signature: &[u8],
    acceptance: impl FnOnce(&Address, &Address) -> Acceptance,
) -> Result<Accepted, SignatureRejected> {
    let owner = group
        .iter()
        .find(|s| s.slot_id == slot)
        .map(|s| &s.validator)
        .ok_or(SignatureRejected::UnknownSlot(slot))?;
    let content = state_sig_content(root, escrow_id, nonce);
    let signer = recover_address(&content, signature)
        .map_err(|reason| SignatureRejected::Invalid { slot, reason })?;
    let accepted = |key| Accepted {
        validator: owner.clone(),
        key,
    };
    if &signer == owner {
        return Ok(accepted(SignerKey::Cold));
    }
    match acceptance(owner, &signer) {
        Acceptance::Cold | Acceptance::Bound | Acceptance::Sibling | Acceptance::Granted => {
            Ok(accepted(SignerKey::Warm))
        }
        Acceptance::Unresolved => Err(SignatureRejected::Unresolved {
            slot,
            validator: owner.clone(),
            warm: signer,
        }),
        Acceptance::Rejected(_) => Err(SignatureRejected::Invalid {
            slot,
            reason: CryptoError::WrongSigner {
                recovered: signer,
                expected: owner.clone(),
            },
        }),
    }
}

/// Weight of the verified signatures so far and the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weight {
    pub weight: u32,
    pub threshold: u32,
}

impl Weight {
    pub fn reached(&self) -> bool {
        self.weight >= self.threshold
    }
}

/// The weight of `signatures` (already verified, slot → signature): every distinct address
/// whose slot signed counts once, with all of its slots.
pub fn weight(group: &[Slot], signatures: &BTreeMap<u32, Vec<u8>>) -> Weight {
    let signers: BTreeSet<&Address> = group
        .iter()
        .filter(|s| signatures.contains_key(&s.slot_id))
        .map(|s| &s.validator)
        .collect();
    let slots = group
        .iter()
        .filter(|s| signers.contains(&s.validator))
        .count();
    Weight {
        weight: u32::try_from(slots).unwrap_or(u32::MAX),
        threshold: threshold(group.len()),
    }
}

/// Adds one verified signature of `signer` for every slot it holds (upstream stores a fetched
/// signature for each slot of that address).
pub fn record(
    group: &[Slot],
    signatures: &mut BTreeMap<u32, Vec<u8>>,
    signer: &Address,
    signature: &[u8],
) {
    for s in group.iter().filter(|s| &s.validator == signer) {
        signatures
            .entry(s.slot_id)
            .or_insert_with(|| signature.to_vec());
    }
}

/// Distinct addresses of the group without a signature yet (whom to ask next).
pub fn missing(group: &[Slot], signatures: &BTreeMap<u32, Vec<u8>>) -> Vec<Address> {
    let mut seen = BTreeSet::new();
    group
        .iter()
        .filter(|s| !signatures.contains_key(&s.slot_id))
        .filter(|s| seen.insert(s.validator.clone()))
        .map(|s| s.validator.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{crypto::SigningKey, state::sign_state, warm::Rejection};

    fn group(keys: &[SigningKey], owners: &[usize]) -> Vec<Slot> {
        owners
            .iter()
            .enumerate()
            .map(|(i, &k)| Slot {
                slot_id: i as u32,
                validator: keys[k].address().clone(),
            })
            .collect()
    }

    #[test]
    fn threshold_is_two_thirds_plus_one() {
        assert_eq!(threshold(7), 5);
        assert_eq!(threshold(4), 3);
        assert_eq!(threshold(1), 1);
        assert_eq!(threshold(3), 3);
    }

    #[test]
    fn multi_slot_validator_counts_once_with_its_slots() {
        let keys: Vec<SigningKey> = (0..3).map(|i| SigningKey::derive("q", i)).collect();
        // Validator 0 holds slots 0, 1, 2; validators 1 and 2 one slot each (N = 5, t = 4).
        let g = group(&keys, &[0, 0, 0, 1, 2]);
        let mut sigs = BTreeMap::new();
        record(&g, &mut sigs, keys[0].address(), &[1; 65]);
        assert_eq!(sigs.len(), 3);
        let w = weight(&g, &sigs);
        assert_eq!((w.weight, w.threshold, w.reached()), (3, 4, false));
        // Recording the same validator again changes nothing.
        record(&g, &mut sigs, keys[0].address(), &[2; 65]);
        assert_eq!(weight(&g, &sigs).weight, 3);
        assert_eq!(missing(&g, &sigs).len(), 2);
        record(&g, &mut sigs, keys[2].address(), &[3; 65]);
        assert!(weight(&g, &sigs).reached());
    }

    fn cold_only(_: &Address, _: &Address) -> Acceptance {
        Acceptance::Rejected(Rejection::NotGranted)
    }

    #[test]
    fn forged_or_wrong_root_signatures_are_rejected() {
        let keys: Vec<SigningKey> = (0..2).map(|i| SigningKey::derive("q", i)).collect();
        let g = group(&keys, &[0, 1]);
        let root = [5u8; 32];
        let at = |n| (&root[..], n);
        let good = sign_state(&root, "42", 9, &keys[1]);
        let ok = accept_state_signature(&g, "42", at(9), 1, &good, cold_only).unwrap();
        assert_eq!(ok.validator, *keys[1].address());
        assert_eq!(ok.key, SignerKey::Cold);
        // Right signer, other slot.
        let e = accept_state_signature(&g, "42", at(9), 0, &good, cold_only).unwrap_err();
        assert_eq!(e.label(), "wrong_signer");
        assert!(e.is_host_fault());
        // Wrong root, wrong nonce.
        let wrong = sign_state(&[6u8; 32], "42", 9, &keys[1]);
        assert!(accept_state_signature(&g, "42", at(9), 1, &wrong, cold_only).is_err());
        assert!(accept_state_signature(&g, "42", at(8), 1, &good, cold_only).is_err());
        assert_eq!(
            accept_state_signature(&g, "42", at(9), 7, &good, cold_only),
            Err(SignatureRejected::UnknownSlot(7))
        );
        let e = accept_state_signature(&g, "42", at(9), 1, &[0u8; 12], cold_only).unwrap_err();
        assert_eq!(e.label(), "malformed");
    }

    #[test]
    fn a_warm_key_counts_for_its_validator_when_the_rule_accepts_it() {
        let keys: Vec<SigningKey> = (0..3).map(|i| SigningKey::derive("q", i)).collect();
        let warm = SigningKey::derive("q/warm", 1);
        let g = group(&keys, &[0, 1, 1]);
        let root = [5u8; 32];
        let sig = sign_state(&root, "42", 9, &warm);
        // Granted (or bound): counts for every slot of validator 1.
        let granted = |v: &Address, r: &Address| {
            assert_eq!((v, r), (keys[1].address(), warm.address()));
            Acceptance::Granted
        };
        let ok = accept_state_signature(&g, "42", (&root, 9), 1, &sig, granted).unwrap();
        assert_eq!(
            (ok.validator.clone(), ok.key),
            (keys[1].address().clone(), SignerKey::Warm)
        );
        let mut sigs = BTreeMap::new();
        record(&g, &mut sigs, &ok.validator, &sig);
        assert_eq!(weight(&g, &sigs).weight, 2);
        for bound in [Acceptance::Bound, Acceptance::Sibling] {
            let a = accept_state_signature(&g, "42", (&root, 9), 2, &sig, |_, _| bound.clone());
            assert_eq!(a.unwrap().key, SignerKey::Warm);
        }
        // Not granted: an invalid signature, charged. Unknown yet: not counted, not charged.
        let e = accept_state_signature(&g, "42", (&root, 9), 1, &sig, cold_only).unwrap_err();
        assert!(e.is_host_fault());
        let e =
            accept_state_signature(&g, "42", (&root, 9), 1, &sig, |_, _| Acceptance::Unresolved)
                .unwrap_err();
        assert_eq!(e.label(), "warm_key_unresolved");
        assert!(!e.is_host_fault());
    }
}
