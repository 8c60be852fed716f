//! Perf estimates: seed 001 (one late-finish failure must not make a host Unresponsive, and must
//! fade), seed 002 (a pending finish is no sample), invariants 6, 8 and 9.

use devshard_actors::{
    outcome::OutcomeClass,
    policy::perf::{is_unresponsive, record, PerfEstimates, PerfSample},
    policy::reason::OutcomeReason,
};
use proptest::prelude::*;

use super::common::{config, outcome, settings, timings, CLASSES, T0};

fn sample(at_ms: i64, success: bool) -> PerfSample {
    PerfSample {
        at_ms,
        success,
        receipt_ms: Some(12.0),
        ttft_ms: Some(150.0),
        input_bytes: 2_000,
        tokens_per_s: None,
    }
}

fn run(samples: &[PerfSample]) -> PerfEstimates {
    samples
        .iter()
        .fold(PerfEstimates::default(), |e, s| record(&e, s, &settings()))
}

#[test]
fn seed_001_one_late_finish_failure_among_successes_is_not_unresponsive_and_fades() {
    let s = settings();
    // Ten successes, then the premature `winner_served_without_finish` failure of #2104.
    let mut samples: Vec<PerfSample> = (0..10).map(|i| sample(T0 + i * 10_000, true)).collect();
    samples.push(sample(T0 + 100_000, false));
    let est = run(&samples);
    for t in (0..7_200).map(|k| T0 + 100_000 + k * 1_000) {
        assert!(!is_unresponsive(&est, &s, t));
    }
    let f0 = est.decayed_failures(&s, T0 + 100_000);
    assert!((f0 - 1.0).abs() < 1e-12);
    let f1 = est.decayed_failures(&s, T0 + 100_000 + 600_000);
    assert!(
        (f1 - 0.5).abs() < 1e-12,
        "halves after one half-life, no hour-long window"
    );
    // Even a fresh host whose only sample is that failure is not Unresponsive.
    assert!(!is_unresponsive(&run(&[sample(T0, false)]), &s, T0));
}

#[test]
fn a_host_that_keeps_failing_becomes_unresponsive_then_recovers_continuously() {
    let s = settings();
    let samples: Vec<PerfSample> = (0..6).map(|i| sample(T0 + i * 1_000, false)).collect();
    let est = run(&samples);
    let start = T0 + 5_000;
    assert!(is_unresponsive(&est, &s, start));
    let flip = (0..100_000)
        .map(|k| start + k * 1_000)
        .find(|&t| !is_unresponsive(&est, &s, t))
        .unwrap();
    // The verdict ends when the decayed samples fall below 4.5 (5 rounded), not at a boundary.
    let n = est.decayed_samples(&s, start);
    let expected = start as f64 + 600_000.0 * (n / 4.5).log2();
    assert!(
        flip as f64 >= expected && flip as f64 - expected <= 1_000.0,
        "{flip} vs {expected}"
    );
}

#[test]
fn seed_002_pending_finish_and_other_classes_are_no_samples() {
    let t = timings(T0, Some(12), Some(150), T0 + 4_000);
    for class in CLASSES {
        let s = PerfSample::from_outcome(&outcome(class, OutcomeReason::HostError, t));
        assert_eq!(
            s.is_some(),
            matches!(class, OutcomeClass::Success | OutcomeClass::HostFault)
        );
    }
    let s = PerfSample::from_outcome(&outcome(OutcomeClass::Success, OutcomeReason::Finished, t))
        .unwrap();
    assert_eq!(
        (s.at_ms, s.success, s.receipt_ms, s.ttft_ms),
        (T0 + 4_000, true, Some(12.0), Some(150.0))
    );
    assert!((s.tokens_per_s.unwrap() - 99.0 / 3.85).abs() < 1e-9);
}

#[test]
fn latency_estimates_have_defaults_floors_and_follow_data() {
    let s = settings();
    let empty = PerfEstimates::default();
    assert_eq!(empty.expected_receipt_p95_ms(&s, T0), 5_000);
    assert_eq!(empty.expected_first_token_p95_ms(&s, T0, 100), 5_000);
    assert_eq!(empty.expected_first_token_ms(&s, T0, 100), 5_000);
    // A fast co-located host: the floors hold the triggers up, the mean follows the data.
    let fast: Vec<PerfSample> = (0..50).map(|i| sample(T0 + i * 1_000, true)).collect();
    let est = run(&fast);
    let now = T0 + 50_000;
    assert_eq!(est.expected_receipt_p95_ms(&s, now), 1_500);
    assert_eq!(est.expected_first_token_p95_ms(&s, now, 2_000), 1_000);
    assert!(est.expected_first_token_ms(&s, now, 2_000) < 300);
    // TTFT grows with input: a + b·bytes.
    let linear: Vec<PerfSample> = (0..40)
        .map(|i| PerfSample {
            input_bytes: i * 1_000,
            ttft_ms: Some(100.0 + 0.5 * (i * 1_000) as f64),
            ..sample(T0 + i as i64, true)
        })
        .collect();
    let est = run(&linear);
    let (a, b) = est.first_token.coefficients();
    assert!(
        (a - 100.0).abs() < 1e-6 && (b - 0.5).abs() < 1e-9,
        "{a} {b}"
    );
}

proptest! {
    #![proptest_config(config(96, 0x5eed_0003))]

    /// Invariant 6: one failure among any number of successes, at any times, is never Unresponsive.
    #[test]
    fn one_failure_never_makes_a_host_unresponsive(
        gaps in prop::collection::vec(0i64..900_000, 10..40),
        failure_at in any::<prop::sample::Index>(),
        probes in prop::collection::vec(0i64..7_200_000, 1..20),
    ) {
        let s = settings();
        let fail = failure_at.index(gaps.len());
        let mut now = T0;
        let mut est = PerfEstimates::default();
        for (i, g) in gaps.iter().enumerate() {
            now += g;
            est = record(&est, &sample(now, i != fail), &s);
            prop_assert!(!is_unresponsive(&est, &s, now));
        }
        for p in probes {
            prop_assert!(!is_unresponsive(&est, &s, now + p));
        }
    }

    /// Invariant 6: between samples every quantity moves one way, so the verdict flips at most
    /// once, from unresponsive to responsive, and a failure's weight falls strictly with age.
    #[test]
    fn verdict_changes_only_where_the_decay_crosses_a_threshold(
        outcomes in prop::collection::vec((0i64..120_000, prop::bool::weighted(0.4)), 1..40),
        step in 1_000i64..60_000,
    ) {
        let s = settings();
        let mut now = T0;
        let mut est = PerfEstimates::default();
        for (gap, ok) in outcomes {
            now += gap;
            est = record(&est, &sample(now, ok), &s);
        }
        let mut prev = (is_unresponsive(&est, &s, now), est.decayed_failures(&s, now), est.success_rate(&s, now));
        for k in 1..400 {
            let t = now + k * step;
            let cur = (is_unresponsive(&est, &s, t), est.decayed_failures(&s, t), est.success_rate(&s, t));
            prop_assert!(prev.0 || !cur.0, "became unresponsive with no new sample");
            prop_assert!(cur.1 <= prev.1 && (prev.1 == 0.0 || cur.1 < prev.1));
            prop_assert!(cur.2 >= prev.2 - 1e-12);
            prev = cur;
        }
    }

    /// Estimates do not depend on the order in which samples arrive (late finishes).
    #[test]
    fn record_is_order_independent(
        raw in prop::collection::vec((0i64..3_600_000, any::<bool>(), 1.0f64..5_000.0, 0u64..50_000), 1..30),
    ) {
        let s = settings();
        let samples: Vec<PerfSample> = raw.iter().map(|&(at, ok, ms, bytes)| PerfSample {
            at_ms: T0 + at, receipt_ms: Some(ms), ttft_ms: Some(ms * 2.0), input_bytes: bytes,
            ..sample(T0 + at, ok)
        }).collect();
        let mut sorted = samples.clone();
        sorted.sort_by_key(|x| x.at_ms);
        let (a, b) = (run(&samples), run(&sorted));
        let now = T0 + 4_000_000;
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-6 * (1.0 + x.abs().max(y.abs()));
        prop_assert!(close(a.decayed_samples(&s, now), b.decayed_samples(&s, now)));
        prop_assert!(close(a.decayed_failures(&s, now), b.decayed_failures(&s, now)));
        prop_assert!(close(a.receipt_ms.mean, b.receipt_ms.mean));
        prop_assert!((a.expected_receipt_p95_ms(&s, now) - b.expected_receipt_p95_ms(&s, now)).abs() <= 1);
    }

    /// Invariants 8 and 9: only Success and HostFault become a sample, from the attempt's own
    /// timestamps, and at most one per outcome.
    #[test]
    fn samples_come_only_from_final_success_or_host_fault(
        class in prop::sample::select(CLASSES.to_vec()),
        send in 0i64..1_000_000, receipt in prop::option::of(0i64..10_000),
        first in prop::option::of(0i64..20_000), dur in 0i64..100_000,
    ) {
        let t = timings(T0 + send, receipt, first, T0 + send + dur);
        let sample = PerfSample::from_outcome(&outcome(class, OutcomeReason::HostError, t));
        prop_assert_eq!(sample.is_some(), class.is_sample());
        if let Some(x) = sample {
            prop_assert_eq!(x.success, class == OutcomeClass::Success);
            prop_assert_eq!(x.at_ms, (T0 + send + dur).max(T0 + send));
            prop_assert_eq!(x.receipt_ms, receipt.map(|r| r as f64));
            prop_assert_eq!(x.ttft_ms, first.map(|f| f as f64));
        }
    }
}
