//! The diffs a host needs, from memory or from the store: the session holds only the newest
//! `[escrow] diff_window` diffs (`session/window.rs`); a host far behind (a catch-up, a repair, a
//! timeout vote that carries a whole catch-up, an inference request to a host that was never
//! sent the older diffs) gets the older ones read back from the store
//! (`Store::load_diffs_from`). Every diff reached the store before any host saw it, so the
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
    /// `SyncHosts` catch-up.
    Sync,
    /// A timeout vote's catch-up, or a pending diff sent on its own.
    Vote,
    /// A diverged host's repair.
    Repair,
}

impl DiffPath {
    fn label(self) -> &'static str {
        match self {
            DiffPath::Attempt => "attempt",
            DiffPath::Resend => "resend",
            DiffPath::Sync => "sync",
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
    let mut out: Vec<Arc<Diff>> = deps
        .store
        .load_diffs_from(escrow_id, after.saturating_add(1))?
        .into_iter()
        .take_while(|d| d.nonce < first_held && d.nonce <= to)
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
