//! The payloads refused-timeout votes need, kept across a `kill -9` (docs/protocol.md §6.5): a
//! verifier accepts a *refused* timeout only with the request's payload (the prompt the host was
//! sent), which lives in memory with the grant. Every granted nonce (and ghost) has its payload
//! written to the store (`timeout_payload`, key `<escrow>/<nonce>`) before its diff, so a nonce
//! restored from the log without a ConfirmStart — its host refused it, or never got it before
//! the kill — gets it back (`Directory`'s spawn) and its refused-timeout vote can still pass.
//! The record is deleted by the 1 s `sync_persist` tick once the nonce settled; for a nonce timed
//! out by vote, once the diff carrying its timeout is durable (`book/payloads.rs`). Log stage
//! `timeout_payload_store_failed`.

use slog::warn;

use super::{EscrowActor, EscrowDeps};
use crate::{
    protocol::{state::InferenceStatus, wire::PayloadJson},
    store::{ns, Store},
};

/// The store key of `nonce`'s payload in escrow `escrow_id`.
pub fn payload_key(escrow_id: &str, nonce: u64) -> String {
    format!("{escrow_id}/{nonce}")
}

/// The persisted payload of an orphan restored from the log, if one was kept.
pub fn restored_payload(store: &dyn Store, escrow_id: &str, nonce: u64) -> Option<PayloadJson> {
    let value = store
        .get(ns::TIMEOUT_PAYLOADS, &payload_key(escrow_id, nonce))
        .ok()??;
    serde_json::from_value(value).ok()
}

/// Writes `nonce`'s payload, queued before its diff's append so that it is durable no later
/// than the grant (the store commits writes in order); a failure is logged (the nonce can then
/// only be timed out by vote while this process lives).
pub(in crate::escrow) fn persist(
    deps: &EscrowDeps,
    escrow_id: &str,
    nonce: u64,
    payload: &PayloadJson,
) {
    let Ok(value) = serde_json::to_value(payload) else {
        return;
    };
    let ack = deps
        .store
        .put(ns::TIMEOUT_PAYLOADS, &payload_key(escrow_id, nonce), value);
    let log = deps.log.clone();
    actix::spawn(async move {
        if let Err(e) = ack.await {
            warn!(log, "payload not persisted"; "stage" => "timeout_payload_store_failed",
                "nonce" => nonce, "error" => %e);
        }
    });
}

impl EscrowActor {
    /// Settles again the nonces whose confirmed timeout a compose skipped while their inference
    /// stayed open (`Session::take_lost_timeouts`). Stage `timeout_lost`, counted in
    /// `devshard_timeout_votes_total{result="lost"}`.
    pub(super) fn requeue_lost_timeouts(&mut self, ctx: &mut actix::Context<Self>) {
        let now = self.now_ms();
        for entry in self.session.take_lost_timeouts(now) {
            let nonce = entry.nonce;
            if self.book.entry(nonce).is_some() {
                continue;
            }
            self.deps
                .metrics
                .timeouts
                .with_label_values(&["lost"])
                .inc();
            warn!(self.deps.log, "a confirmed timeout no longer applied and the inference is still open; settled again";
                "stage" => "timeout_lost", "nonce" => nonce);
            self.book.insert(entry);
            self.arm_nonce_timer(nonce, ctx);
        }
    }

    /// Deletes the payloads of nonces settled since the last tick; those timed out by vote once
    /// their timeout is durable (a `kill -9` before it makes their vote run again, which needs
    /// the payload: `book/payloads.rs`).
    pub(super) fn drop_settled_payloads(&mut self) {
        let state = self.session.state();
        let sequenced = |n: u64| {
            state.record(n).is_some_and(|r| {
                !matches!(
                    r.status,
                    InferenceStatus::Pending | InferenceStatus::Started
                )
            })
        };
        let (escrow_nonce, durable) = (self.session.nonce(), self.durable.durable_nonce());
        let released = self
            .book
            .take_released_payloads(sequenced, escrow_nonce, durable);
        for nonce in released {
            let key = payload_key(self.escrow_id(), nonce);
            let ack = self.deps.store.delete(ns::TIMEOUT_PAYLOADS, &key);
            let log = self.deps.log.clone();
            actix::spawn(async move {
                // A record left behind is only ever read for an unsettled nonce.
                if let Err(e) = ack.await {
                    warn!(log, "settled nonce's payload not deleted"; "stage" => "timeout_payload_store_failed",
                        "nonce" => nonce, "error" => %e);
                }
            });
        }
    }
}
