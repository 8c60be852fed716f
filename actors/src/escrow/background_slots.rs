//! Which background catch-ups run their rounds now (`actor/background.rs`): at most
//! `reach_background_catch_ups` (2) hosts at once; the others keep their mark (their nonces
//! pass over them) and wait their turn, the one lacking the fewest diffs first.
//!
//! Chaos (seed `s33-a`, invariant 3): every host restarted empty 32 000 nonces behind and all
//! five were caught up at once, sharing the gateway's store reads and encoding and, in the
//! simulator, the hosts' two cores: 42 s later each held 15 200, none could serve, and the
//! first was through after 95 s. Two at a time, the first two are through after about two
//! fifths of that and serve while the others catch up; the gateway's catch-up work stays
//! bounded whatever the number of far hosts. A host whose round failed or moved it nowhere
//! yields its slot to one waiting.

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::crypto::Address;

/// The running and waiting background catch-ups of one escrow.
#[derive(Debug)]
pub struct BackgroundSlots {
    /// At most this many run rounds at once (0: no bound).
    limit: usize,
    running: BTreeSet<Address>,
    /// Waiting hosts, with the rounds in a row that moved them nowhere (their retry wait).
    waiting: BTreeMap<Address, u32>,
}

impl BackgroundSlots {
    pub fn new(limit: usize) -> BackgroundSlots {
        BackgroundSlots {
            limit,
            running: BTreeSet::new(),
            waiting: BTreeMap::new(),
        }
    }

    /// `host` is about to run a round: `true` when it holds a slot or takes a free one; else it
    /// waits (with `stuck`) until [`Self::leave`] or [`Self::yield_slot`] hands it one.
    pub fn enter(&mut self, host: &Address, stuck: u32) -> bool {
        if self.running.contains(host) {
            return true;
        }
        if self.limit == 0 || self.running.len() < self.limit {
            self.waiting.remove(host);
            self.running.insert(host.clone());
            return true;
        }
        self.waiting.insert(host.clone(), stuck);
        false
    }

    /// `host`'s catch-up is over: its slot (or its place in the queue) is freed. The waiting
    /// host to run next, if a slot is free: the one lacking the fewest diffs (`lacks`).
    pub fn leave(
        &mut self,
        host: &Address,
        lacks: impl Fn(&Address) -> u64,
    ) -> Option<(Address, u32)> {
        self.waiting.remove(host);
        self.running.remove(host);
        self.next(lacks)
    }

    /// `host`'s round failed or moved it nowhere (`stuck` in a row): when another waits, `host`
    /// waits again and that one runs (returned); else `host` keeps its slot (`None`).
    pub fn yield_slot(
        &mut self,
        host: &Address,
        stuck: u32,
        lacks: impl Fn(&Address) -> u64,
    ) -> Option<(Address, u32)> {
        if self.waiting.is_empty() || !self.running.remove(host) {
            return None;
        }
        let next = self.next(lacks);
        self.waiting.insert(host.clone(), stuck);
        next
    }

    fn next(&mut self, lacks: impl Fn(&Address) -> u64) -> Option<(Address, u32)> {
        if self.limit != 0 && self.running.len() >= self.limit {
            return None;
        }
        let host = self.waiting.keys().min_by_key(|h| lacks(h))?.clone();
        let stuck = self.waiting.remove(&host).unwrap_or(0);
        self.running.insert(host.clone());
        Some((host, stuck))
    }

    /// Hosts whose rounds run now, and hosts waiting for a slot.
    pub fn counts(&self) -> (usize, usize) {
        (self.running.len(), self.waiting.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::unchecked(s)
    }

    fn lacks(h: &Address) -> u64 {
        match h.as_str() {
            "h1" => 30_000,
            "h2" => 20_000,
            "h3" => 25_000,
            _ => 0,
        }
    }

    #[test]
    fn one_runs_and_the_one_lacking_the_fewest_is_next() {
        let mut s = BackgroundSlots::new(1);
        assert!(s.enter(&a("h1"), 0));
        assert!(s.enter(&a("h1"), 0), "its next round keeps the slot");
        assert!(!s.enter(&a("h2"), 0));
        assert!(!s.enter(&a("h3"), 2));
        assert_eq!(s.counts(), (1, 2));
        assert_eq!(s.leave(&a("h1"), lacks), Some((a("h2"), 0)));
        assert_eq!(s.leave(&a("h2"), lacks), Some((a("h3"), 2)));
        assert_eq!(s.leave(&a("h3"), lacks), None);
        assert_eq!(s.counts(), (0, 0));
    }

    #[test]
    fn a_stuck_host_yields_only_to_one_waiting() {
        let mut s = BackgroundSlots::new(1);
        assert!(s.enter(&a("h1"), 0));
        assert_eq!(s.yield_slot(&a("h1"), 1, lacks), None, "nobody waits");
        assert!(!s.enter(&a("h2"), 0));
        assert_eq!(s.yield_slot(&a("h1"), 1, lacks), Some((a("h2"), 0)));
        assert_eq!(s.counts(), (1, 1));
        // h1 waits with its count; it runs again once h2 is over.
        assert_eq!(s.leave(&a("h2"), lacks), Some((a("h1"), 1)));
    }

    #[test]
    fn a_waiting_host_that_leaves_frees_its_place_and_no_bound_runs_all() {
        let mut s = BackgroundSlots::new(1);
        assert!(s.enter(&a("h1"), 0));
        assert!(!s.enter(&a("h2"), 0));
        assert_eq!(s.leave(&a("h2"), lacks), None, "the slot is still h1's");
        assert_eq!(s.counts(), (1, 0));
        let mut all = BackgroundSlots::new(0);
        assert!(["h1", "h2", "h3"].iter().all(|h| all.enter(&a(h), 0)));
        assert_eq!(all.counts(), (3, 0));
    }
}
