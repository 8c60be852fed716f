//! Phase gating (docs/health.md §7, docs/protocol.md §9.1): what a *new* chat request gets, given
//! the chain view. Attempts already running are not this function's business: they finish.
//!
//! - No epoch snapshot, or one older than its bound → `Serve`. A stale phase is not evidence of
//!   PoC; the hosts themselves answer 503 `requests_disabled` during PoC, which is an `Overload`
//!   outcome (back-off, never a strike).
//! - Inference (and confirmation PoC inactive/completed) → `Serve`.
//! - PoC or an active confirmation PoC, mode `off` → `Refuse` with `Retry-After` = time to the
//!   expected end of the raw PoC stages (blocks left × estimated block time), or, when the end is
//!   unknown or already due, the time to our next phase poll.
//! - Same, mode `relaxed` → `ServeOnly` the participants that keep a node preserved for the model
//!   (`timeslot_allocation[1]`), plus, in validation phases, those whose fresh `/v1/versions`
//!   reports a validation-capable node for it. No such participant, or no fresh participants
//!   list → `Refuse`.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{
    settings::PocMode,
    snapshot::{CpocPhase, EpochPhase, PhaseKind},
    view::{ChainView, ENDPOINT_EPOCHS},
};

/// Bounds of the `Retry-After` we hand to clients, seconds.
const MIN_RETRY_AFTER_S: u64 = 1;
const MAX_RETRY_AFTER_S: u64 = 3_600;

/// What a new request gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "admission", rename_all = "snake_case")]
pub enum Admission {
    /// Route as usual.
    Serve,
    /// Answer 503 with `Retry-After: retry_after_s` and `{"error":{"message": message}}`.
    Refuse {
        retry_after_s: u64,
        phase: PhaseKind,
        message: String,
    },
    /// Route only to these participant addresses (relaxed PoC).
    ServeOnly {
        preserved: BTreeSet<String>,
        phase: PhaseKind,
    },
}

/// The reference gateway's wording of the blocking phase.
fn phase_text(view: &ChainView) -> &'static str {
    let Some(e) = &view.epoch else {
        return "PoC";
    };
    match (&e.info.phase, e.info.confirmation_poc) {
        (EpochPhase::PoCGenerate, _) => "PoC generation",
        (EpochPhase::PoCGenerateWindDown, _) => "PoC generation wind down",
        (EpochPhase::PoCValidate, _) => "PoC validation",
        (EpochPhase::PoCValidateWindDown, _) => "PoC validation wind down",
        (_, Some((CpocPhase::GracePeriod, _))) => "confirmation PoC grace period",
        (_, Some((CpocPhase::Generation, _))) => "confirmation PoC generation",
        (_, Some((CpocPhase::Validation, _))) => "confirmation PoC validation",
        _ => "PoC",
    }
}

/// Seconds a refused client should wait (see the module docs).
pub fn retry_after_s(view: &ChainView, now_ms: i64) -> u64 {
    let poc_end = view.epoch.as_ref().and_then(|e| e.poc_end_ms);
    let ms = match poc_end {
        Some(end) if end > now_ms => end - now_ms,
        _ => view
            .endpoint(ENDPOINT_EPOCHS)
            .and_then(|s| s.next_poll_ms)
            .map(|next| next - now_ms)
            .filter(|&d| d > 0)
            .unwrap_or_else(|| {
                i64::try_from(view.settings.chain_phase_poll_interval_ms).unwrap_or(i64::MAX)
            }),
    };
    let secs = u64::try_from(ms).unwrap_or(0).div_ceil(1_000);
    secs.clamp(MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S)
}

/// Participants that may serve `model` now (relaxed mode).
pub fn preserved_for(view: &ChainView, model: &str, now_ms: i64) -> BTreeSet<String> {
    let Some(list) = &view.participants else {
        return BTreeSet::new();
    };
    let validation = view.epoch.as_ref().is_some_and(|e| e.info.is_validation());
    list.participants
        .values()
        .filter(|p| {
            if p.nodes_for(model).any(|n| n.preserved) {
                return true;
            }
            validation
                && view.fresh_versions(&p.address, now_ms).is_some_and(|v| {
                    p.nodes_for(model)
                        .any(|n| v.nodes.get(&n.node_id).copied().unwrap_or(false))
                })
        })
        .map(|p| p.address.clone())
        .collect()
}

/// `Retry-After` and message of a refused new request (`extra` is appended to the message).
/// Also the answer of a relaxed-mode request whose escrows have no preserved host (the edge
/// builds it from the view it routed with).
pub fn refusal(view: &ChainView, now_ms: i64, extra: &str) -> (u64, String) {
    let message = format!(
        "devshard temporarily unavailable during {}{extra}",
        phase_text(view)
    );
    (retry_after_s(view, now_ms), message)
}

/// What a new request for `model` gets at `now_ms` (see the module docs).
pub fn admission(view: &ChainView, mode: PocMode, model: &str, now_ms: i64) -> Admission {
    if view.epoch_stale(now_ms) {
        return Admission::Serve;
    }
    let phase = match view.phase_kind() {
        None | Some(PhaseKind::Inference) => return Admission::Serve,
        Some(kind) => kind,
    };
    let refuse = |extra: &str| {
        let (retry_after_s, message) = refusal(view, now_ms, extra);
        Admission::Refuse {
            retry_after_s,
            phase,
            message,
        }
    };
    match mode {
        PocMode::Off => refuse(""),
        PocMode::Relaxed if view.participants_stale(now_ms) => {
            refuse(" (no fresh participants list to find preserved hosts)")
        }
        PocMode::Relaxed => {
            let preserved = preserved_for(view, model, now_ms);
            if preserved.is_empty() {
                refuse(&format!(" (no host preserved for model {model})"))
            } else {
                Admission::ServeOnly { preserved, phase }
            }
        }
    }
}
