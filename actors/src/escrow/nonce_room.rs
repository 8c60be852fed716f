//! The nonces an Active escrow may still use (docs/protocol.md §5.8, docs/lifecycle.md §1).
//!
//! Hosts reject every Active-phase diff beyond `max_nonce − (N + 1)` (the *last active nonce*,
//! `EscrowInfo::last_active_nonce`): the `N + 1` above it are the finalize rounds'. So the
//! finalize round's own diff must be at the last active nonce at the latest, and every open
//! inference (started, neither finished nor timed out) may still need a diff of its own for its
//! finish or its timeout. Found by the hour-long chaos run: an escrow near its limit with ~2 000
//! inferences open (hosts refusing, then timed out by vote) went on composing timeout diffs
//! 2 150 nonces past the limit; every host refused them, the finalize round with them, and the
//! escrow could never settle.
//!
//! Two rules, both pure:
//! - [`diff_fits`]: the hard guard on every composed diff. Beyond the room, a diff is not
//!   composed at all; its txs stay queued and ride the finalize round's diff.
//! - [`start_fits`]: a new inference starts only when its own diff, one diff for every open
//!   inference and its own settlement, and the finalize round still fit.

/// Whether an Active-phase diff at `nonce` may be composed: at most `last_active − 1` for any
/// diff, so that the finalize round (`finalize`) always finds `last_active` free.
pub fn diff_fits(nonce: u64, last_active: u64, finalize: bool) -> bool {
    if finalize {
        nonce <= last_active
    } else {
        nonce < last_active
    }
}

/// Whether a new inference may start after `nonce` while `open` inferences are unsettled: its
/// start diff, `open + 1` settlement diffs (theirs and its own) and the finalize round must all
/// fit at or below `last_active`.
pub fn start_fits(nonce: u64, open: u64, last_active: u64) -> bool {
    nonce
        .saturating_add(1)
        .saturating_add(open)
        .saturating_add(1)
        .saturating_add(1)
        <= last_active
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_active_nonce_is_kept_for_the_finalize_round() {
        assert!(diff_fits(98, 100, false));
        assert!(diff_fits(99, 100, false));
        assert!(
            !diff_fits(100, 100, false),
            "only the finalize round may take it"
        );
        assert!(diff_fits(100, 100, true));
        assert!(
            !diff_fits(101, 100, true),
            "hosts reject an Active diff beyond it"
        );
    }

    #[test]
    fn a_start_leaves_a_diff_for_every_open_inference_and_the_finalize_round() {
        // Nothing open: start at 98, its settlement at 99, finalize at 100.
        assert!(start_fits(97, 0, 100));
        assert!(!start_fits(98, 0, 100));
        // 10 open: start at 88, 11 settlements up to 99, finalize at 100.
        assert!(start_fits(87, 10, 100));
        assert!(!start_fits(88, 10, 100));
        assert!(!start_fits(0, u64::MAX, 100), "saturates, never wraps");
    }

    #[test]
    fn every_start_admitted_leaves_room_for_its_settlements() {
        // Whatever the open count, a start admitted by `start_fits` leaves every settlement
        // diff and the finalize round inside the guard.
        for open in 0..50u64 {
            for nonce in 0..120u64 {
                if start_fits(nonce, open, 100) {
                    let last_settlement = nonce + 1 + open + 1;
                    assert!(diff_fits(last_settlement, 100, false));
                    assert!(diff_fits(last_settlement + 1, 100, true));
                }
            }
        }
    }
}
