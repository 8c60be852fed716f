//! The payloads refused-timeout votes need, kept across a `kill -9` (docs/protocol.md §6.5): a
//! verifier accepts a *refused* timeout only with the request's payload (the prompt the host was
//! sent), which lives in memory with the grant. A nonce that goes on the refused-timeout path
//! (its record Pending: no ConfirmStart) has its payload written to the store
//! (`timeout_payload`, key `<escrow>/<nonce>`, in the background: its vote is at least
//! `refusal_timeout` away); a restarted escrow gives it back to the orphan restored from the log
//! (`Directory`'s spawn), so that vote can still pass. The record is deleted by the 1 s
//! `sync_persist` tick once the nonce settled. Log stages `timeout_payload_kept`,
//! `timeout_payload_store_failed`.

use slog::{debug, warn};

use super::EscrowActor;
use crate::{
    protocol::wire::PayloadJson,
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

impl EscrowActor {
    /// Persists the payload of a nonce now awaiting a refused timeout (once per nonce).
    pub(super) fn keep_refusal_payload(&mut self, nonce: u64) {
        let Some(entry) = self.book.entry(nonce) else {
            return;
        };
        let Some(payload) = entry.payload.as_ref().filter(|_| entry.confirmed_at.is_none()) else {
            return;
        };
        let Ok(value) = serde_json::to_value(payload) else {
            return;
        };
        if !self.book.keep_payload(nonce) {
            return;
        }
        let key = payload_key(self.escrow_id(), nonce);
        debug!(self.deps.log, "refused-timeout payload kept"; "stage" => "timeout_payload_kept",
            "nonce" => nonce);
        let ack = self.deps.store.put(ns::TIMEOUT_PAYLOADS, &key, value);
        let log = self.deps.log.clone();
        actix::spawn(async move {
            if let Err(e) = ack.await {
                warn!(log, "refused-timeout payload not persisted"; "stage" => "timeout_payload_store_failed",
                    "nonce" => nonce, "error" => %e);
            }
        });
    }

    /// Deletes the payloads of nonces settled since the last tick.
    pub(super) fn drop_settled_payloads(&mut self) {
        for nonce in self.book.take_released_payloads() {
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
