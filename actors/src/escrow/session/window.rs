//! The session's diff window: memory that does not grow with the escrow's age.
//!
//! Only the newest [`Session::diff_window`] diffs stay in memory (`[escrow] diff_window`); every
//! diff is durable in the store before any host sees it, so an older one is read back from there
//! when a host far behind needs it (`escrow/diff_log.rs`). What a diff older than the window
//! still answers for comes from elsewhere:
//! - the `MsgStartInference` of a live nonce (receipt checks) is rebuilt from the state
//!   machine's inference record, which holds every field of it (`start_of`);
//! - the root a host reports at an old nonce (a catch-up chunk's answer) is checked against the
//!   roots of the diffs last read back from the store ([`RECALLED_ROOTS`] at most, kept until
//!   every host acknowledged past them); a report at a nonce neither holds is refused
//!   ([`SessionError::BeyondWindow`](crate::protocol::session_error::SessionError)), never
//!   taken unchecked.

use std::sync::Arc;

use super::Session;
use crate::protocol::diff::Diff;

/// Diffs kept in memory by default (the newest nonces).
pub const DEFAULT_DIFF_WINDOW: usize = 256;

/// Roots of diffs read back from the store, kept at most (the lowest nonces go first).
pub const RECALLED_ROOTS: usize = 16_384;

impl Session {
    /// Keeps at most the newest `window` diffs in memory (at least 1).
    pub fn with_diff_window(mut self, window: usize) -> Session {
        self.diff_window = window.max(1);
        self.trim();
        self
    }

    /// Diffs kept in memory at most.
    pub fn diff_window(&self) -> usize {
        self.diff_window
    }

    /// Diffs held in memory now.
    pub fn held_diffs(&self) -> usize {
        self.diffs.len()
    }

    /// The oldest nonce whose diff is in memory (our nonce + 1 when none is).
    pub fn first_held(&self) -> u64 {
        self.diffs
            .keys()
            .next()
            .copied()
            .unwrap_or_else(|| self.nonce().saturating_add(1))
    }

    /// The diffs in `(after, to]`, at most `limit`, when memory holds them all; `None` when some
    /// left the window (the caller reads them from the store).
    pub fn held_after(&self, after: u64, to: u64, limit: usize) -> Option<Vec<Arc<Diff>>> {
        let from = after.saturating_add(1);
        if from > to.min(self.nonce()) {
            return Some(Vec::new());
        }
        if from < self.first_held() {
            return None;
        }
        Some(
            self.diffs
                .range(from..=to)
                .take(limit)
                .map(|(_, d)| d.clone())
                .collect(),
        )
    }

    /// Remembers the roots of diffs read back from the store, so a host's answer at one of
    /// their nonces can still be checked (see the module docs).
    pub fn recall_roots(&self, diffs: &[Arc<Diff>]) {
        let first_held = self.first_held();
        let mut recalled = self.recalled.borrow_mut();
        for d in diffs.iter().filter(|d| d.nonce < first_held) {
            recalled.insert(d.nonce, d.post_state_root.clone());
        }
        while recalled.len() > RECALLED_ROOTS {
            recalled.pop_first();
        }
    }

    /// The root of `nonce` from memory: the window, then the recalled roots.
    pub(super) fn held_root(&self, nonce: u64) -> Option<Vec<u8>> {
        match self.diffs.get(&nonce) {
            Some(d) => Some(d.post_state_root.clone()),
            None => self.recalled.borrow().get(&nonce).cloned(),
        }
    }

    /// Adds a diff at the top of the window and lets the oldest go beyond its size.
    pub(super) fn hold(&mut self, diff: Arc<Diff>) {
        self.diffs.insert(diff.nonce, diff);
        self.trim();
    }

    fn trim(&mut self) {
        while self.diffs.len() > self.diff_window {
            self.diffs.pop_first();
        }
        // Recalled roots nobody can report any more: every host acknowledged past them.
        let hosts = self.info.hosts.len();
        let lowest_sync = if self.host_sync.len() >= hosts {
            self.host_sync.values().min().copied().unwrap_or(0)
        } else {
            0
        };
        let mut recalled = self.recalled.borrow_mut();
        while recalled
            .first_key_value()
            .is_some_and(|(n, _)| *n <= lowest_sync)
        {
            recalled.pop_first();
        }
    }
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
