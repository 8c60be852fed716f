//! State signatures of the final root and their weight (PROTOCOL.md §5.7, LIFECYCLE.md §1).
//!
//! A signature counts only after it verified against `StateSignatureContent{root, escrow, nonce}`
//! and the slot's owner. The weight counts each distinct validator address once, with its slot
//! count; the quorum is `2·slots/3 + 1`. Pure functions, unit-tested without a runtime.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::protocol::{
    crypto::{recover_address, Address, CryptoError},
    state::{state_sig_content, Slot},
};

/// Why a fetched signature is not counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureRejected {
    #[error("slot {0} is not in the group")]
    UnknownSlot(u32),
    #[error("signature of slot {slot} does not verify: {reason}")]
    Invalid { slot: u32, reason: CryptoError },
}

/// The quorum threshold of a group of `slots` slots: `2·slots/3 + 1`.
pub fn threshold(slots: usize) -> u32 {
    let n = u32::try_from(slots).unwrap_or(u32::MAX);
    (2 * n / 3).saturating_add(1)
}

/// Accepts a state signature of `slot` over `root` at `nonce`: the signer must be the slot's
/// validator (cold key). The one place a warm-key acceptance (LIFECYCLE.md §5) plugs in.
pub fn accept_state_signature(
    group: &[Slot],
    escrow_id: &str,
    root: &[u8],
    nonce: u64,
    slot: u32,
    signature: &[u8],
) -> Result<Address, SignatureRejected> {
    let owner = group
        .iter()
        .find(|s| s.slot_id == slot)
        .map(|s| &s.validator)
        .ok_or(SignatureRejected::UnknownSlot(slot))?;
    let content = state_sig_content(root, escrow_id, nonce);
    let signer = recover_address(&content, signature)
        .map_err(|reason| SignatureRejected::Invalid { slot, reason })?;
    if &signer == owner {
        Ok(signer)
    } else {
        Err(SignatureRejected::Invalid {
            slot,
            reason: CryptoError::WrongSigner {
                recovered: signer,
                expected: owner.clone(),
            },
        })
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
    use crate::protocol::{crypto::SigningKey, state::sign_state};

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

    #[test]
    fn forged_or_wrong_root_signatures_are_rejected() {
        let keys: Vec<SigningKey> = (0..2).map(|i| SigningKey::derive("q", i)).collect();
        let g = group(&keys, &[0, 1]);
        let root = [5u8; 32];
        let good = sign_state(&root, "42", 9, &keys[1]);
        assert_eq!(
            accept_state_signature(&g, "42", &root, 9, 1, &good).unwrap(),
            *keys[1].address()
        );
        // Right signer, other slot.
        assert!(accept_state_signature(&g, "42", &root, 9, 0, &good).is_err());
        // Wrong root, wrong nonce.
        let wrong = sign_state(&[6u8; 32], "42", 9, &keys[1]);
        assert!(accept_state_signature(&g, "42", &root, 9, 1, &wrong).is_err());
        assert!(accept_state_signature(&g, "42", &root, 8, 1, &good).is_err());
        assert_eq!(
            accept_state_signature(&g, "42", &root, 9, 7, &good),
            Err(SignatureRejected::UnknownSlot(7))
        );
    }
}
