//! Hosts catching up (module docs of `reach`): who carries each catch-up (a client's attempt or
//! a background sync), when it is over, and whether a refused resend waits for it.

use super::{Carrier, Reachability};
use crate::protocol::crypto::Address;

impl Reachability {
    /// `host`'s attempt at `nonce` carries its catch-up; `true` when it was not catching up.
    pub fn catching_up(&mut self, host: &Address, nonce: u64, now: i64) -> bool {
        if !self.settings.enabled || self.catching.contains_key(host) {
            return false;
        }
        self.catching
            .insert(host.clone(), (Carrier::Attempt(nonce), now));
        true
    }

    /// Whether a host lacking `lacks` diffs must be caught up in the background.
    pub fn is_far(&self, lacks: u64) -> bool {
        let above = self.settings.background_above;
        self.settings.enabled && above > 0 && lacks > above
    }

    /// `host` is caught up by a background sync from now on; `true` when nothing carried its
    /// catch-up until now (the caller starts the sync).
    pub fn syncing(&mut self, host: &Address, now: i64) -> bool {
        if !self.settings.enabled || self.catching.contains_key(host) {
            return false;
        }
        self.catching.insert(host.clone(), (Carrier::Sync, now));
        true
    }

    /// Whether a background sync carries `host`'s catch-up.
    pub fn is_syncing(&self, host: &Address) -> bool {
        self.catching
            .get(host)
            .is_some_and(|(c, _)| *c == Carrier::Sync)
    }

    /// The background sync of `host` is over; `true` when it was syncing.
    pub fn sync_over(&mut self, host: &Address) -> bool {
        if self.is_syncing(host) {
            self.catching.remove(host);
            return true;
        }
        false
    }

    /// Hosts caught up by a background sync (no other send may go to them meanwhile).
    pub fn syncing_hosts(&self) -> Vec<Address> {
        (self.catching.iter())
            .filter(|(_, (c, _))| *c == Carrier::Sync)
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// The catch-up of `host` is over (`true`) when the attempt at `nonce` that carried it ended
    /// (`answered`: false, the nonce must be that attempt's), or when the host answered an
    /// inference at `nonce` or later (`answered`: true; it holds every diff the catch-up
    /// carried). Another attempt of the host ending does not end it: the hour-long run's
    /// refused resends each ended the mark, and the host's next nonces carried the catch-up
    /// again.
    pub fn caught_up(&mut self, host: &Address, nonce: u64, answered: bool) -> bool {
        let over = |(c, _): &(Carrier, i64)| match c {
            Carrier::Attempt(n) if answered => *n <= nonce,
            Carrier::Attempt(n) => *n == nonce,
            Carrier::Sync => false,
        };
        if self.catching.get(host).is_some_and(over) {
            self.catching.remove(host);
            return true;
        }
        false
    }

    /// Whether the attempt at `nonce` is the one carrying `host`'s catch-up.
    pub fn is_catching_up_at(&self, host: &Address, nonce: u64) -> bool {
        (self.catching.get(host)).is_some_and(|(c, _)| *c == Carrier::Attempt(nonce))
    }

    /// Whether `host` is catching up (in any attempt).
    pub fn is_catching_up(&self, host: &Address) -> bool {
        self.catching.contains_key(host)
    }

    /// Whether a resend to `host` refused because another attempt carries its catch-up should
    /// rather wait for that catch-up: no other host could take the request, and the catch-up
    /// began less than `catch_up_wait_ms` ago.
    /// A background sync's catch-up takes as long as the host needs, so no resend waits for it.
    pub fn resend_waits(&self, host: &Address, candidates: &[Address], now: i64) -> bool {
        let Some((Carrier::Attempt(_), since)) = self.catching.get(host) else {
            return false;
        };
        let another = self.another_can_serve(host, candidates, now);
        !another && now.saturating_sub(*since) < self.settings.catch_up_wait_ms
    }
}
