//! Nonces a restored session still has to settle (after a restart: attempts whose race died
//! with the process).

use super::Session;
use crate::{
    escrow::nonces::{NonceEntry, NonceState},
    outcome::AttemptTimings,
    protocol::{proto::Tx, state::InferenceStatus},
};

impl Session {
    /// What the finishes queued for the next diff will give back to the balance (each record's
    /// reserve less its actual cost): the pick counts it as spendable, since the next start's
    /// diff applies those finishes before the start.
    pub fn pending_refunds(&self) -> u64 {
        let price = self.info.config.token_price;
        self.pending
            .iter()
            .filter_map(|tx| match &tx.tx {
                Some(Tx::FinishInference(f)) => {
                    let rec = self.sm.record(f.inference_id)?;
                    let open = matches!(
                        rec.status,
                        InferenceStatus::Pending | InferenceStatus::Started
                    );
                    let cost = f
                        .input_tokens
                        .saturating_add(f.output_tokens)
                        .saturating_mul(price);
                    open.then(|| rec.reserved_cost.saturating_sub(cost))
                }
                _ => None,
            })
            .fold(0u64, u64::saturating_add)
    }

    /// Nonces whose inference is neither finished nor timed out in our own state (after a
    /// restart: attempts whose race died with the process). They are settled like a pending
    /// finish: reconciliation polls, then a timeout vote at the protocol deadline. Read from the
    /// inference records, so a nonce whose diff left the window is still found.
    pub fn unsettled_entries(&self, now_ms: i64) -> Vec<NonceEntry> {
        self.sm
            .records()
            .filter_map(|rec| self.unsettled_entry(rec.inference_id, now_ms))
            .collect()
    }

    /// Nonces whose confirmed timeout a compose skipped while their inference is still open:
    /// the record moved on after the vote was asked (a refused vote, then the host's
    /// ConfirmStart sequenced first, through a mempool), so the tx no longer applied and the
    /// nonce, already out of the book, would never be settled. Each comes back as an unsettled
    /// entry (polls, then a vote on what the record is now). Found by CI's 10⁴ property
    /// schedules on `ed800b2` (schedule 6199, invariant 4: inference 499 still started on every
    /// host at the escrow's nonce, its refused timeout confirmed and dropped).
    pub fn take_lost_timeouts(&mut self, now_ms: i64) -> Vec<NonceEntry> {
        let lost = std::mem::take(&mut self.lost_timeouts);
        lost.into_iter()
            .filter_map(|nonce| self.unsettled_entry(nonce, now_ms))
            .collect()
    }

    /// `nonce` as an entry to settle, when its inference is open in our state and no finish of
    /// it was seen.
    fn unsettled_entry(&self, nonce: u64, now_ms: i64) -> Option<NonceEntry> {
        let rec = self.sm.record(nonce)?;
        let open = matches!(
            rec.status,
            InferenceStatus::Pending | InferenceStatus::Started
        );
        if !open || self.finished.contains(&nonce) {
            return None;
        }
        let host = self.info.slot_for_nonce(nonce)?.validator.clone();
        Some(NonceEntry {
            nonce,
            host,
            race_id: None,
            request_id: String::new(),
            started_at: rec.started_at,
            confirmed_at: Some(rec.confirmed_at).filter(|c| *c > 0),
            payload: None,
            timings: AttemptTimings::default(),
            state: NonceState::PendingFinish {
                ended_ms: now_ms,
                next_poll_ms: 1_000,
            },
            crowned: false,
            emitted: true,
        })
    }
}
