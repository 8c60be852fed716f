//! Settling an ended attempt (HEALTH.md §1, §5): what its end means — the outcome class and
//! reason (attribution), whether another attempt may help, whether the host lost our diffs, and
//! what it answered (for the fault signature). Pure; the actor applies the judgement to the
//! nonce book, the fault guard and host routing. A finish marker that arrives after the stream
//! ended is reconciled by polls of the executor's mempool (timer `nonce <n>`).

use crate::{
    host::{HostError, Rejection},
    outcome::{AttemptEnd, OutcomeClass},
    policy::{attribution, reason::OutcomeReason},
};

/// What an attempt's end means.
pub(super) struct Judgement {
    pub class: OutcomeClass,
    pub reason: OutcomeReason,
    /// Another attempt on another host may help.
    pub retry: bool,
    /// The host lost diffs (restarted empty): replay from nonce 1 on the next send.
    pub host_lost_diffs: bool,
}

/// Judges an attempt's end (`finished`: its finish marker is sequenced already).
pub(super) fn judge(end: &AttemptEnd, finished: bool, crowned: bool) -> Judgement {
    let (class, reason) = attribution::classify(end, finished);
    let host_lost_diffs = matches!(
        end,
        AttemptEnd::Host(e) if matches!(
            e.rejection(),
            Some(Rejection::NonceGap { .. } | Rejection::SessionNotFound)
        )
    );
    Judgement {
        class,
        reason,
        retry: !crowned && attribution::worth_retrying(class),
        host_lost_diffs,
    }
}

/// HTTP status and message of a failed attempt (for the fault signature).
pub(super) fn end_details(end: &AttemptEnd) -> (Option<u16>, String) {
    match end {
        AttemptEnd::Host(HostError::Status {
            status, message, ..
        }) => (Some(*status), message.clone()),
        AttemptEnd::Host(e) => (None, e.to_string()),
        AttemptEnd::ErrorEvent { status, message } => (*status, message.clone()),
        AttemptEnd::ReceiptRejected(e) => (None, e.to_string()),
        other => (None, format!("{other:?}")),
    }
}
