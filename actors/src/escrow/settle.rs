//! Settling an ended attempt (docs/health.md §1, §5): what its end means — the outcome class and
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
    /// The host holds fewer diffs than we thought (a nonce gap, a lost session): the nonce it
    /// holds, from which the next send replays.
    pub host_holds: Option<u64>,
}

/// Judges an attempt's end (`finished`: its finish marker is sequenced already).
pub(super) fn judge(end: &AttemptEnd, finished: bool, crowned: bool) -> Judgement {
    let (class, reason) = attribution::classify(end, finished);
    let host_holds = match end {
        AttemptEnd::Host(e) => e.rejection().and_then(Rejection::host_holds),
        _ => None,
    };
    Judgement {
        class,
        reason,
        retry: !crowned && attribution::worth_retrying(class),
        host_holds,
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
