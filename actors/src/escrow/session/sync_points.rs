//! What each host holds, as far as the session knows: its *sync point* (the highest nonce it
//! acknowledged in a receipt) and its *sent mark* (the highest nonce an inference request carried
//! to it). Catch-up for votes, syncs and repairs starts at the sync point (`catch_up_after`). An
//! inference request for nonce `n` starts at `max(sync, min(sent, n − window))`
//! (`windowed_after`); the diffs come from memory or, below the diff window, from the store
//! (`escrow/diff_log.rs`): every diff no request carried to the host yet, and at least the newest
//! `window` diffs (or all above the sync point, when fewer), so it still fits when it overtakes
//! a few earlier bodies on the way. Its size is bounded by `window` plus what the host was never
//! sent, whatever the number of requests in flight. A body that overtook more (or followed one
//! that was never sent) gets the host's nonce gap naming what it holds, and the same nonce is
//! sent again from there (`EscrowActor`'s `ResendGrant`).

use std::collections::BTreeMap;

use super::Session;
use crate::protocol::crypto::Address;

impl Session {
    /// Highest nonce the host acknowledged.
    pub fn host_sync(&self, host: &Address) -> u64 {
        self.host_sync.get(host).copied().unwrap_or(0)
    }

    /// Every host's sync nonce (persisted so restarts keep catch-up contiguous).
    pub fn host_syncs(&self) -> &BTreeMap<Address, u64> {
        &self.host_sync
    }

    /// Restores sync nonces (after a restart) — never beyond our own nonce.
    pub fn set_host_sync(&mut self, host: Address, nonce: u64) {
        self.host_sync.insert(host, nonce.min(self.nonce()));
    }

    /// Forgets what a host acknowledged (it lost its session): the next send replays from 1.
    pub fn reset_host_sync(&mut self, host: &Address) {
        self.rewind_host_sync(host, 0);
    }

    /// Moves a host's sync point (and its sent mark) back to what it says it holds (a nonce
    /// gap), never beyond our nonce. Returns the sync point it had.
    pub fn rewind_host_sync(&mut self, host: &Address, holds: u64) -> u64 {
        let to = holds.min(self.nonce());
        if let Some(sent) = self.host_sent.get_mut(host) {
            *sent = (*sent).min(to);
        }
        self.host_sync.insert(host.clone(), to).unwrap_or(0)
    }

    /// The host applied our diffs up to `nonce` (it answered a request that carried them, such
    /// as a timeout vote): its sync point moves up there, never back and never beyond our nonce.
    /// A host that did not hold them after all answers the next send with its nonce gap, which
    /// moves it back ([`Self::rewind_host_sync`]).
    pub fn acknowledged(&mut self, host: &Address, nonce: u64) {
        let to = nonce.min(self.nonce());
        let sync = self.host_sync.entry(host.clone()).or_insert(0);
        *sync = (*sync).max(to);
    }

    /// `diffsForHost` starts above this: the diffs the host has not acknowledged.
    pub fn catch_up_after(&self, host: &Address) -> u64 {
        self.host_sync(host)
    }

    /// Diffs `host` lacks by its sync point.
    pub fn lacks(&self, host: &Address) -> u64 {
        self.nonce().saturating_sub(self.catch_up_after(host))
    }

    /// An inference request for `nonce` carries the diffs above this (see the module docs).
    pub fn windowed_after(&self, host: &Address, nonce: u64, window: usize) -> u64 {
        let sent = self.host_sent.get(host).copied().unwrap_or(0);
        let window = u64::try_from(window.max(1)).unwrap_or(u64::MAX);
        self.host_sync(host)
            .max(sent.min(nonce.saturating_sub(window)))
    }

    /// An inference request carrying diffs up to `nonce` is on its way to `host`.
    pub fn mark_sent(&mut self, host: &Address, nonce: u64) {
        let sent = self.host_sent.entry(host.clone()).or_insert(0);
        *sent = (*sent).max(nonce);
    }
}
