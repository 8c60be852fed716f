//! A bounded memo of signature recoveries: `(digest, signature) → signer address`.
//!
//! Recovery is a pure function and the most expensive step of the protocol (≈ 40 µs); the same
//! signature is often checked more than once in one process: the gateway verifies a receipt or a
//! finish marker on arrival and its state machine checks it again when the `MsgConfirmStart` /
//! `MsgFinishInference` is sequenced; the simulated hosts of one network (one process) each check
//! every diff's user signature; the gateway's cost ledger replays the escrow's own diffs with
//! their user signature verified, which the escrow remembers as it signs them
//! (`SigningKey::sign_remembered`). Remembering successful recoveries makes every repeat a hash
//! lookup. Failures are never remembered (they are recomputed, and they are rare).
//!
//! Two generations bound the memory: when the current one holds [`GENERATION_CAPACITY`] entries it
//! becomes the previous one (dropping the older), so recent signatures stay and lookups are O(1).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex, PoisonError,
    },
};

use super::crypto::{Address, SIGNATURE_LEN};

/// Entries per generation (at most twice this many are kept, ≈ 2 MiB).
pub const GENERATION_CAPACITY: usize = 8_192;

type Key = ([u8; 32], [u8; SIGNATURE_LEN]);

#[derive(Default)]
struct Generations {
    current: HashMap<Key, Address>,
    previous: HashMap<Key, Address>,
}

static MEMO: Mutex<Option<Generations>> = Mutex::new(None);

/// Recoveries answered by the memo, and computed, since the process started.
static ANSWERED: AtomicU64 = AtomicU64::new(0);
static COMPUTED: AtomicU64 = AtomicU64::new(0);

/// How this process's recoveries were answered since it started
/// (`devshard_signature_recoveries_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// From the memo.
    pub memo: u64,
    /// Computed with secp256k1 (successful or not).
    pub computed: u64,
}

/// The counts so far.
pub fn counts() -> Counts {
    Counts {
        memo: ANSWERED.load(Ordering::Relaxed),
        computed: COMPUTED.load(Ordering::Relaxed),
    }
}

/// Counts one recovery: `true` when the memo answered it.
pub fn count(from_memo: bool) {
    let counter = if from_memo { &ANSWERED } else { &COMPUTED };
    counter.fetch_add(1, Ordering::Relaxed);
}

fn key(digest: [u8; 32], sig: &[u8]) -> Option<Key> {
    Some((digest, sig.try_into().ok()?))
}

/// The remembered signer of `sig` over `digest`, if this process recovered it recently.
pub fn lookup(digest: [u8; 32], sig: &[u8]) -> Option<Address> {
    let key = key(digest, sig)?;
    let memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
    let generations = memo.as_ref()?;
    generations
        .current
        .get(&key)
        .or_else(|| generations.previous.get(&key))
        .cloned()
}

/// Remembers a successful recovery.
pub fn remember(digest: [u8; 32], sig: &[u8], signer: &Address) {
    let Some(key) = key(digest, sig) else {
        return;
    };
    let mut memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
    let generations = memo.get_or_insert_with(Generations::default);
    if generations.current.len() >= GENERATION_CAPACITY {
        generations.previous = std::mem::take(&mut generations.current);
    }
    generations.current.insert(key, signer.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::crypto::{recover_address, sha256, SigningKey};

    #[test]
    fn a_remembered_recovery_is_returned_and_a_different_signature_is_not() {
        let key = SigningKey::from_hex(&"11".repeat(32)).unwrap();
        let sig = key.sign(b"memo test message");
        let digest = sha256(b"memo test message");
        assert_eq!(
            recover_address(b"memo test message", &sig).unwrap(),
            *key.address()
        );
        assert_eq!(lookup(digest, &sig), Some(key.address().clone()));
        let mut other = sig;
        other[10] ^= 1;
        assert_eq!(lookup(digest, &other), None);
        assert_eq!(lookup(sha256(b"another message"), &sig), None);
    }

    #[test]
    fn memory_is_bounded_to_two_generations() {
        let signer = SigningKey::from_hex(&"22".repeat(32))
            .unwrap()
            .address()
            .clone();
        for i in 0..(2 * GENERATION_CAPACITY + 10) {
            let mut digest = [0u8; 32];
            digest[..8].copy_from_slice(&(i as u64).to_le_bytes());
            digest[31] = 0xee;
            remember(digest, &[1u8; SIGNATURE_LEN], &signer);
        }
        let memo = MEMO.lock().unwrap();
        let g = memo.as_ref().unwrap();
        assert!(g.current.len() <= GENERATION_CAPACITY);
        assert!(g.previous.len() <= GENERATION_CAPACITY);
    }
}
