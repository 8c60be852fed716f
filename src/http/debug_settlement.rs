//! The `settlement` entries of `GET /v1/debug/actors` (admin key): one per registered escrow,
//! whether or not a settlement actor runs for it, so an escrow stuck in collecting or broadcast
//! is visible next to one that still serves (docs/lifecycle.md §1).
//!
//! Each entry: `state` (`active` … `settled`, the settlement state machine's label), `alive`
//! (a settlement actor is running), and `detail` with the attempts of the current step, the last
//! error, the signature weight and threshold, the tx hashes, the final nonce, and the escrow's
//! budget (`nonce`, `serving_limit`, `unsettled`, `nonces_left`, `balance`) as the auto-settle tick saw it.
//! `detail.role` is the escrow's role for new requests (`active`, `retiring` while it drains and
//! settles, `settled`) and `detail.can_spend` its balance as last seen.
//! A running actor is asked with the listing's probe deadline; one that misses it shows its
//! last durable record.

use serde_json::{json, Value};

use devshard_actors::settlement::SettlementState;

use crate::state::{settlements::SettlementView, AppState};

/// One listing entry.
pub fn entry(v: &SettlementView) -> Value {
    let r = v.record.as_ref();
    let state = r.map_or("active", |r| r.state.label());
    // Its role for new requests: picked (active), draining and settling (retiring), or done.
    let role = match r.map(|r| &r.state) {
        None | Some(SettlementState::Active) => "active",
        Some(SettlementState::Settled { .. }) => "settled",
        Some(_) => "retiring",
    };
    json!({
        "kind": "settlement",
        "id": v.escrow_id,
        "state": state,
        "alive": v.running,
        "detail": {
            "escrow_id": v.escrow_id,
            "attempts": r.map_or(0, |r| r.attempts),
            "last_error": r.and_then(|r| r.last_error.clone()),
            "weight": r.and_then(|r| r.weight).map(|w| w.weight),
            "threshold": r.and_then(|r| r.weight).map(|w| w.threshold),
            "final_nonce": r.and_then(|r| r.final_nonce),
            "tx_hashes": r.map(|r| r.tx_hashes.clone()).unwrap_or_default(),
            "started_ms": r.map(|r| r.started_ms),
            "updated_ms": r.map(|r| r.updated_ms),
            "budget": v.budget,
            "role": role,
            "can_spend": v.budget.map(|b| b.balance),
        },
    })
}

/// Every escrow's settlement entry.
pub async fn entries(state: &AppState) -> Vec<Value> {
    state
        .settlements
        .views(super::debug::PROBE_TIMEOUT)
        .await
        .iter()
        .map(entry)
        .collect()
}
