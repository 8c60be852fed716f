//! The diffs a host needs, from memory or from the store: the session holds only the newest
//! `[escrow] diff_window` diffs (`session/window.rs`); a host far behind (a timeout vote that
//! carries a whole catch-up, the inline chunk of an inference request to a host that was never
//! sent the older diffs) gets the older ones read back from the store
//! (`Store::load_diffs_range`). The longer catch-ups of attempts, resends and repairs are read
//! chunk by chunk as they are sent instead (`escrow/prelude.rs`). Every diff reached the store before any host saw it, so the
//! store holds them all; their roots are recalled by the session so the host's answers at those
//! nonces are still verified. The read runs on the escrow's thread, but only for a host below
//! the window: the hot path (a host within `catch_up_window`) never reaches the store.
//! Log stage `diffs_from_store`, metric `devshard_diffs_from_store_total{path}`.

use std::sync::Arc;

use super::{error::EscrowError, session::Session, EscrowDeps};
use crate::protocol::diff::Diff;

/// Why diffs are read back (the `path` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DiffPath {
    /// An attempt's bodies (its prelude and request).
    Attempt,
    /// The same nonce again after the host's nonce gap.
    Resend,
    /// A timeout vote's catch-up, or a pending diff sent on its own.
    Vote,
    /// A diverged host's repair.
    Repair,
}

impl DiffPath {
    pub(super) fn label(self) -> &'static str {
        match self {
            DiffPath::Attempt => "attempt",
            DiffPath::Resend => "resend",
            DiffPath::Vote => "vote",
            DiffPath::Repair => "repair",
        }
    }
}

/// The diffs in `(after, to]`, oldest first, at most `limit`: from the window when it holds
/// them all, otherwise the part below it from the store.
pub(super) fn diffs_after(
    session: &Session,
    deps: &EscrowDeps,
    path: DiffPath,
    after: u64,
    to: u64,
    limit: usize,
) -> Result<Vec<Arc<Diff>>, EscrowError> {
    if let Some(held) = session.held_after(after, to, limit) {
        return Ok(held);
    }
    let first_held = session.first_held();
    let escrow_id = &session.info().escrow_id;
    let last = first_held
        .saturating_sub(1)
        .min(to)
        .min(after.saturating_add(u64::try_from(limit).unwrap_or(u64::MAX)));
    let mut out: Vec<Arc<Diff>> = deps
        .store
        .load_diffs_range(escrow_id, after.saturating_add(1), last)?
        .into_iter()
        .take(limit)
        .map(Arc::new)
        .collect();
    let read = out.len();
    let expected = first_held
        .min(to.saturating_add(1))
        .saturating_sub(after.saturating_add(1));
    if u64::try_from(read).unwrap_or(u64::MAX) < expected.min(limit as u64) {
        return Err(EscrowError::Store(format!(
            "diffs {}..{first_held} of escrow {escrow_id}: {read} in the store",
            after.saturating_add(1)
        )));
    }
    session.recall_roots(&out);
    let room = limit.saturating_sub(read);
    if room > 0 {
        out.extend(
            session
                .held_after(first_held.saturating_sub(1), to, room)
                .unwrap_or_default(),
        );
    }
    deps.metrics
        .diffs_from_store
        .with_label_values(&[path.label()])
        .inc_by(read as u64);
    slog::info!(deps.log, "diffs below the window read back from the store";
        "stage" => "diffs_from_store", "path" => path.label(), "from" => after.saturating_add(1),
        "diffs" => read, "first_held" => first_held);
    Ok(out)
}

/// Makes sure a host's report at `nonce` can be checked: a root below the window that the session
/// neither kept nor recalled is read back from the store (one diff). Answers that arrive after
/// their roots left memory (a catch-up of thousands of diffs while new diffs push the window on)
/// are then verified instead of refused as beyond the window (the hour-long chaos run: two hosts
/// restarted empty, every catch-up attempt ended `session_error`). A failed read leaves the
/// report to be refused as before.
pub(super) fn recall_root(session: &Session, deps: &EscrowDeps, nonce: u64) {
    if nonce == 0 || nonce >= session.first_held() || session.knows_root(nonce) {
        return;
    }
    let escrow_id = &session.info().escrow_id;
    match deps.store.load_diffs_range(escrow_id, nonce, nonce) {
        Ok(diffs) => {
            for d in &diffs {
                session.recall_one(d);
            }
            deps.metrics
                .diffs_from_store
                .with_label_values(&["root"])
                .inc_by(diffs.len() as u64);
        }
        Err(e) => {
            slog::warn!(deps.log, "a root below the window could not be read back"; "stage" => "diffs_from_store_failed",
                "nonce" => nonce, "error" => %e);
        }
    }
}
