//! `warm_keys_hash` (PROTOCOL.md §5.4, LIFECYCLE.md §5) and warm-key deltas.
//!
//! ```text
//! warm_keys_hash = sha256(for slot asc: slot_be4 ‖ len_be4 ‖ addr)      sha256("") when none
//! ```
//! `addr` is the bech32 text of the bound address (its UTF-8 bytes), `len` its byte length.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::protocol::crypto::Address;

/// One slot's warm-key binding (an entry of a warm-key delta stored with its diff).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmBinding {
    pub slot: u32,
    pub address: Address,
}

/// The hash of every binding, slots ascending.
pub fn warm_keys_hash(bindings: &BTreeMap<u32, Address>) -> [u8; 32] {
    let mut h = Sha256::new();
    for (slot, addr) in bindings {
        let bytes = addr.as_str().as_bytes();
        h.update(slot.to_be_bytes());
        h.update(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        h.update(bytes);
    }
    h.finalize().into()
}

/// The bindings `after` holds that `before` does not, slots ascending.
pub fn warm_delta(
    before: &BTreeMap<u32, Address>,
    after: &BTreeMap<u32, Address>,
) -> Vec<WarmBinding> {
    after
        .iter()
        .filter(|(slot, _)| !before.contains_key(slot))
        .map(|(slot, address)| WarmBinding {
            slot: *slot,
            address: address.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_bindings_hash_to_sha256_of_nothing() {
        assert_eq!(
            hex::encode(warm_keys_hash(&BTreeMap::new())),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn the_delta_lists_only_new_slots() {
        let a = Address::unchecked("gonka1a");
        let b = Address::unchecked("gonka1b");
        let before = BTreeMap::from([(0, a.clone())]);
        let after = BTreeMap::from([(0, a), (3, b.clone())]);
        assert_eq!(
            warm_delta(&before, &after),
            [WarmBinding {
                slot: 3,
                address: b
            }]
        );
    }
}
