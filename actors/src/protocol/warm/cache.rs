//! [`GrantCache`]: what the gateway knows of the chain's warm-key grants.
//!
//! Positive answers are kept for the life of the process (upstream does the same; a grant that
//! bound a key stays in the state anyway, LIFECYCLE.md §5). Negative answers are kept for
//! [`NEGATIVE_TTL_MS`] and at most [`NEGATIVE_CAPACITY`] of them (the oldest go first), so a
//! host spraying random keys cannot grow memory and a key granted later is seen within the TTL.
//! A key with no fresh answer resolves to [`GrantAnswer::Unknown`]: the caller asks the chain.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Mutex, MutexGuard, PoisonError},
};

use super::{GrantAnswer, WarmKeyResolver};
use crate::{clock::SharedClock, protocol::crypto::Address};

/// Most negative answers kept.
pub const NEGATIVE_CAPACITY: usize = 4_096;
/// How long a negative answer is trusted.
pub const NEGATIVE_TTL_MS: i64 = 60_000;

type Pair = (Address, Address);

#[derive(Debug, Default)]
struct Entries {
    granted: HashSet<Pair>,
    /// Expiry (unix ms) of each negative answer.
    denied: HashMap<Pair, i64>,
    /// Negative answers in insertion order (may hold stale pairs, skipped on eviction).
    order: VecDeque<(Pair, i64)>,
}

/// Cached grant answers, keyed by `(validator, warm)`.
#[derive(Debug)]
pub struct GrantCache {
    clock: SharedClock,
    entries: Mutex<Entries>,
}

impl GrantCache {
    pub fn new(clock: SharedClock) -> GrantCache {
        GrantCache {
            clock,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached answer (expired negatives are [`GrantAnswer::Unknown`]).
    pub fn get(&self, validator: &Address, warm: &Address) -> GrantAnswer {
        let key = (validator.clone(), warm.clone());
        let now = self.clock.now_ms();
        let e = self.lock();
        if e.granted.contains(&key) {
            GrantAnswer::Granted
        } else if e.denied.get(&key).is_some_and(|until| *until > now) {
            GrantAnswer::NotGranted
        } else {
            GrantAnswer::Unknown
        }
    }

    /// Remembers a definite chain answer.
    pub fn put(&self, validator: &Address, warm: &Address, granted: bool) {
        let key = (validator.clone(), warm.clone());
        let mut e = self.lock();
        if granted {
            e.denied.remove(&key);
            e.granted.insert(key);
            return;
        }
        if e.granted.contains(&key) {
            return;
        }
        let until = self.clock.now_ms().saturating_add(NEGATIVE_TTL_MS);
        e.denied.insert(key.clone(), until);
        e.order.push_back((key, until));
        while e.denied.len() > NEGATIVE_CAPACITY {
            let Some((old, at)) = e.order.pop_front() else {
                break;
            };
            if e.denied.get(&old) == Some(&at) {
                e.denied.remove(&old);
            }
        }
        // Stale order entries (re-inserted or promoted pairs) are bounded by the live ones.
        if e.order.len() > 2 * NEGATIVE_CAPACITY {
            let live = std::mem::take(&mut e.order);
            e.order = live
                .into_iter()
                .filter(|(k, at)| e.denied.get(k) == Some(at))
                .collect();
        }
    }

    /// Entries held (positive and negative).
    pub fn len(&self) -> usize {
        let e = self.lock();
        e.granted.len() + e.denied.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl WarmKeyResolver for GrantCache {
    fn resolve(&self, validator: &Address, warm: &Address) -> GrantAnswer {
        self.get(validator, warm)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    };

    use super::*;
    use crate::clock::Clock;

    #[derive(Debug, Default)]
    struct Manual(AtomicI64);
    impl Clock for Manual {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn a(i: usize) -> Address {
        Address::unchecked(format!("gonka1k{i}"))
    }

    #[test]
    fn positives_stay_and_negatives_expire() {
        let clock = Arc::new(Manual::default());
        let cache = GrantCache::new(clock.clone());
        assert_eq!(cache.get(&a(0), &a(1)), GrantAnswer::Unknown);
        cache.put(&a(0), &a(1), true);
        cache.put(&a(0), &a(2), false);
        assert_eq!(cache.get(&a(0), &a(1)), GrantAnswer::Granted);
        assert_eq!(cache.get(&a(0), &a(2)), GrantAnswer::NotGranted);
        clock.0.store(NEGATIVE_TTL_MS + 1, Ordering::SeqCst);
        assert_eq!(cache.get(&a(0), &a(1)), GrantAnswer::Granted);
        assert_eq!(cache.get(&a(0), &a(2)), GrantAnswer::Unknown);
        // A later "yes" wins over a "no"; a later "no" never erases a "yes".
        cache.put(&a(0), &a(2), true);
        cache.put(&a(0), &a(2), false);
        assert_eq!(cache.get(&a(0), &a(2)), GrantAnswer::Granted);
    }

    #[test]
    fn negatives_are_bounded_and_the_oldest_go_first() {
        let cache = GrantCache::new(Arc::new(Manual::default()));
        for i in 0..NEGATIVE_CAPACITY + 10 {
            cache.put(&a(0), &a(i + 1), false);
        }
        assert_eq!(cache.len(), NEGATIVE_CAPACITY);
        assert_eq!(cache.get(&a(0), &a(1)), GrantAnswer::Unknown);
        assert_eq!(
            cache.get(&a(0), &a(NEGATIVE_CAPACITY + 10)),
            GrantAnswer::NotGranted
        );
    }
}
