//! The nonce book's persisted refused-timeout payloads (`actor/payloads.rs`): which nonces have
//! one, which settled nonces' records are to be deleted, and the nonces timed out by vote whose
//! record waits until their timeout is durable.
//!
//! A confirmed timeout is a queued `MsgTimeoutInference`, sequenced into a later diff. Until
//! that diff is durable, a `kill -9` restores the nonce from the log as unsettled, and its vote
//! runs again, which every verifier refuses without the payload. CI's run of `c49679b` (seed
//! 12, release build): eleven votes confirmed 40 ms before a kill -9, their payloads deleted by
//! the next tick, and after the restart every round got weight 0 until invariant 4 found the
//! inferences still pending on their hosts 71 s past their deadline.

use std::collections::{BTreeMap, BTreeSet};

/// See the module docs.
#[derive(Debug, Default)]
pub(in crate::escrow) struct Payloads {
    /// Nonces whose payload is persisted and not settled.
    kept: BTreeSet<u64>,
    /// Settled nonces whose record is to be deleted.
    released: Vec<u64>,
    /// Nonces timed out by vote: `None` until the state sequences their timeout, then the
    /// escrow's nonce at that moment (the timeout is in a diff at or below it).
    timed_out: BTreeMap<u64, Option<u64>>,
}

impl Payloads {
    /// Records that `nonce`'s payload is persisted; `false` when it was already.
    pub(in crate::escrow) fn keep(&mut self, nonce: u64) -> bool {
        self.kept.insert(nonce)
    }

    /// `nonce` settled: its record goes at the next [`Payloads::take_released`].
    pub(in crate::escrow) fn release(&mut self, nonce: u64) {
        if self.kept.remove(&nonce) {
            self.released.push(nonce);
        }
    }

    /// `nonce` was timed out by vote: its record stays until the timeout is durable
    /// ([`Payloads::release_durable`]).
    pub(in crate::escrow) fn hold_until_durable(&mut self, nonce: u64) {
        if self.kept.remove(&nonce) {
            self.timed_out.insert(nonce, None);
        }
    }

    /// Releases the timed-out nonces whose timeout is durable: once `sequenced(nonce)` holds (the
    /// state no longer has it pending or started), it waits for `durable_nonce` to reach the
    /// escrow's nonce of that moment, `escrow_nonce`.
    pub(in crate::escrow) fn release_durable(
        &mut self,
        sequenced: impl Fn(u64) -> bool,
        escrow_nonce: u64,
        durable_nonce: u64,
    ) {
        for (nonce, at) in self.timed_out.iter_mut() {
            if at.is_none() && sequenced(*nonce) {
                *at = Some(escrow_nonce);
            }
        }
        let done: Vec<u64> = self
            .timed_out
            .iter()
            .filter(|(_, at)| at.is_some_and(|at| at <= durable_nonce))
            .map(|(n, _)| *n)
            .collect();
        for nonce in done {
            self.timed_out.remove(&nonce);
            self.released.push(nonce);
        }
    }

    /// Settled nonces whose record is to be deleted now.
    pub(in crate::escrow) fn take_released(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_c49679b_a_timed_out_nonce_keeps_its_payload_until_its_timeout_is_durable() {
        let mut p = Payloads::default();
        assert!(p.keep(7) && p.keep(8) && !p.keep(7));
        // 8 finished (durable), 7 timed out by vote: only 8's record goes at once.
        p.release(8);
        p.hold_until_durable(7);
        assert_eq!(p.take_released(), [8]);
        // The timeout is queued, not yet in a diff: kept, however durable the log is.
        p.release_durable(|_| false, 100, 100);
        assert!(p.take_released().is_empty());
        // Sequenced while the escrow is at 102 and 100 is durable: still kept.
        p.release_durable(|n| n == 7, 102, 100);
        assert!(p.take_released().is_empty());
        // The escrow moved on; 102 durable: released, once.
        p.release_durable(|n| n == 7, 110, 102);
        assert_eq!(p.take_released(), [7]);
        p.release_durable(|_| true, 120, 120);
        assert!(p.take_released().is_empty());
        // A nonce never persisted has nothing to hold or release.
        p.hold_until_durable(9);
        p.release(9);
        p.release_durable(|_| true, 130, 130);
        assert!(p.take_released().is_empty());
    }
}
