//! Builders shared by the policy tests.

use devshard_actors::{
    outcome::{AttemptOutcome, AttemptTimings, OutcomeClass},
    policy::{reason::OutcomeReason, settings::HealthSettings},
};
use proptest::test_runner::{Config, RngSeed};

/// A plausible unix time (ms) to start from.
pub const T0: i64 = 1_700_000_000_000;

/// Every outcome class.
pub const CLASSES: [OutcomeClass; 9] = [
    OutcomeClass::Success,
    OutcomeClass::PendingFinish,
    OutcomeClass::HostFault,
    OutcomeClass::Overload,
    OutcomeClass::EscrowFault,
    OutcomeClass::GatewayFault,
    OutcomeClass::RequestFault,
    OutcomeClass::Diverged,
    OutcomeClass::Cancelled,
];

pub fn settings() -> HealthSettings {
    HealthSettings::default()
}

/// Fixed seed, no persistence files, `cases` cases.
pub fn config(cases: u32, seed: u64) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Timings of an attempt sent at `send` that took `receipt`/`first` ms to receipt/first content
/// and ended at `end`.
pub fn timings(send: i64, receipt: Option<i64>, first: Option<i64>, end: i64) -> AttemptTimings {
    AttemptTimings {
        send_ms: send,
        receipt_ms: receipt.map(|r| send + r),
        first_token_ms: first.map(|f| send + f),
        first_content_ms: first.map(|f| send + f),
        end_ms: end,
        input_bytes: 2_000,
        content_chunks: if first.is_some() { 100 } else { 0 },
    }
}

pub fn outcome(
    class: OutcomeClass,
    reason: OutcomeReason,
    timings: AttemptTimings,
) -> AttemptOutcome {
    AttemptOutcome {
        escrow_id: "42".into(),
        nonce: 7,
        class,
        reason,
        timings,
        finish_late_ms: None,
    }
}
