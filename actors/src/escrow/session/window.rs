//! The session's diff window: memory that does not grow with the escrow's age.
//!
//! Memory holds the diffs some host has not acknowledged yet (from the lowest sync point of the
//! group, inclusive: the root a host reports there is checked against it), and at most the newest
//! [`Session::diff_window`] of them (`[escrow] diff_window`): an escrow whose hosts keep up holds
//! a handful of diffs whatever its age. Every diff is durable in the store before any host sees
//! it, so an older one is read back from there when a host far behind needs it
//! (`escrow/diff_log.rs`). What a diff older than the window
//! still answers for comes from elsewhere:
//! - the `MsgStartInference` of a live nonce (receipt checks) is rebuilt from the state
//!   machine's inference record, which holds every field of it (`start_of`);
//! - the root a host reports at an old nonce is checked against the roots kept apart: those of
//!   the diffs that left memory (the newest [`LATE_ROOTS`] at or below the lowest sync point: an
//!   answer that arrives late) and those of the diffs last read back from the store for a
//!   catch-up ([`RECALLED_ROOTS`] at most); a report at a nonce neither holds is refused
//!   ([`SessionError::BeyondWindow`](crate::protocol::session_error::SessionError)), never
//!   taken unchecked. A root is kept as its 32 bytes inline ([`Root`]: no allocation each; a
//!   diff whose root is not 32 bytes long is never composed, and would not be recalled).

use std::sync::Arc;

use super::Session;
use crate::protocol::diff::Diff;

/// Diffs kept in memory by default (the newest nonces).
pub const DEFAULT_DIFF_WINDOW: usize = 256;

/// Roots of diffs read back from the store, kept at most (the lowest nonces go first).
pub const RECALLED_ROOTS: usize = 16_384;

/// Roots at or below the lowest sync point kept for answers that arrive late (out of order, or
/// from a body overtaken on a jittered link): the newest this many.
pub const LATE_ROOTS: usize = 256;

/// A state root kept apart (SHA-256).
pub(super) type Root = [u8; 32];

/// `root` as a [`Root`], when it is 32 bytes long.
fn root(root: &[u8]) -> Option<Root> {
    root.try_into().ok()
}

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
            if let Some(r) = root(&d.post_state_root) {
                recalled.insert(d.nonce, r);
            }
        }
        while recalled.len() > RECALLED_ROOTS {
            recalled.pop_first();
        }
    }

    /// Whether the root of `nonce` is in memory (the window or the roots kept apart).
    pub fn knows_root(&self, nonce: u64) -> bool {
        self.held_root(nonce).is_some()
    }

    /// Keeps the root of one diff read back for a host's report at its nonce, apart from the
    /// recalled roots and their cap: with the cap reached by the newer roots of other catch-ups,
    /// a recalled root older than all of them was let go at once, and the report was refused
    /// anyway (the hour-long run: 473 "below the diff window and not recalled" after the fix
    /// that reads it back).
    pub fn recall_one(&self, diff: &Diff) {
        if let Some(r) = root(&diff.post_state_root) {
            *self.asked.borrow_mut() = Some((diff.nonce, r));
        }
    }

    /// The root of `nonce` from memory: the window, then the recalled roots, then the one read
    /// back for a report.
    pub(super) fn held_root(&self, nonce: u64) -> Option<Vec<u8>> {
        if let Some(d) = self.diffs.get(&nonce) {
            return Some(d.post_state_root.clone());
        }
        if let Some(r) = self.recalled.borrow().get(&nonce) {
            return Some(r.to_vec());
        }
        self.asked
            .borrow()
            .filter(|(n, _)| *n == nonce)
            .map(|(_, r)| r.to_vec())
    }

    /// An idle escrow's compaction: lets go of all but the newest `keep` diffs held (at least 1),
    /// keeping their roots apart as [`Session::trim`] does. The window refills from the next
    /// diff on; a host that needs an older one gets it from the store, as any host below the
    /// window does.
    pub fn compact_window(&mut self, keep: usize) {
        let window = self.diff_window;
        self.diff_window = keep.clamp(1, window);
        self.trim();
        self.diff_window = window;
    }

    /// Adds a diff at the top of the window and lets the oldest go beyond its size.
    pub(super) fn hold(&mut self, diff: Arc<Diff>) {
        self.diffs.insert(diff.nonce, diff);
        self.trim();
    }

    /// The lowest sync point of the group's hosts (0 while one never answered).
    pub fn lowest_sync(&self) -> u64 {
        self.info
            .hosts
            .iter()
            .map(|h| self.host_sync(&h.address))
            .min()
            .unwrap_or(0)
    }

    /// Lets go of the diffs beyond the window and those every host acknowledged (the lowest sync
    /// point's own diff stays), keeping their roots apart (see the module docs).
    pub(super) fn trim(&mut self) {
        let lowest_sync = self.lowest_sync();
        let mut recalled = self.recalled.borrow_mut();
        while self.diffs.len() > self.diff_window
            || self
                .diffs
                .first_key_value()
                .is_some_and(|(n, _)| *n < lowest_sync)
        {
            if let Some((nonce, diff)) = self.diffs.pop_first() {
                if let Some(r) = root(&diff.post_state_root) {
                    recalled.insert(nonce, r);
                }
            }
        }
        while recalled.len() > RECALLED_ROOTS
            || (recalled.len() > LATE_ROOTS
                && recalled
                    .first_key_value()
                    .is_some_and(|(n, _)| *n <= lowest_sync))
        {
            recalled.pop_first();
        }
    }
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
