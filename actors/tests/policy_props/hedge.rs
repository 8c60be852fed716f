//! Hedging: the RTT-aware target (seed 001's mixed-latency fleet), skipped nonces, the budget
//! (invariant 7) and the liveness rule for crowning (invariant 4, seed 000's probation deadlock).

use devshard_actors::policy::{
    health::Preference,
    hedge::{
        choose_winner, hedge_decision, hedge_trigger, AttemptView, CandidateView, CrownDecision,
        HedgeBudget, HedgeDecision, HedgeReason, PrimaryProgress, SkipReason,
    },
    settings::HealthSettings,
};
use proptest::prelude::*;

use super::common::{config, settings, T0};

fn host(ttft: i64, skip: u32) -> CandidateView {
    CandidateView {
        skip_nonces: skip,
        expected_receipt_p95_ms: 1_500,
        expected_first_token_ms: ttft,
        expected_first_token_p95_ms: (ttft * 2).max(1_000),
        unresponsive: false,
        preference: Preference::Healthy,
        routable: true,
        in_race: false,
    }
}

fn progress(got_receipt: bool) -> PrimaryProgress {
    PrimaryProgress {
        sent_ms: T0,
        got_receipt,
        got_first_content: false,
        attempts: 1,
        catching_up: false,
    }
}

#[test]
fn a_fast_primary_is_not_hedged_onto_slower_remote_hosts() {
    let s = settings();
    let primary = host(150, 0);
    let remote = [host(1_500, 0), host(1_600, 1)];
    let p = progress(true);
    let at = |dt| hedge_decision(&primary, &p, &remote, true, &s, T0 + dt);
    assert_eq!(
        at(999),
        HedgeDecision::Wait {
            until_ms: T0 + 1_000
        }
    );
    assert_eq!(
        at(1_000),
        HedgeDecision::Wait {
            until_ms: T0 + 1_200
        }
    );
    assert_eq!(
        at(1_200),
        HedgeDecision::Skip {
            reason: SkipReason::NoFasterHost
        }
    );
    // Very late (past the remote host's own first-token time) it becomes worth it.
    assert!(matches!(
        at(1_600),
        HedgeDecision::Hedge {
            target_index: 0,
            ..
        }
    ));
    // An Unresponsive primary is hedged at once, to the best host available.
    let dead = CandidateView {
        unresponsive: true,
        ..primary
    };
    assert_eq!(
        hedge_decision(&dead, &p, &remote, true, &s, T0),
        HedgeDecision::Hedge {
            target_index: 0,
            reason: HedgeReason::PrimaryUnresponsive,
            skip_nonces: 0
        }
    );
}

#[test]
fn triggers_use_receipt_then_first_token_with_floors_and_defaults() {
    let s = settings();
    let unknown = host(5_000, 0);
    let none = CandidateView {
        expected_receipt_p95_ms: 5_000,
        expected_first_token_p95_ms: 5_000,
        ..unknown
    };
    assert_eq!(
        hedge_trigger(&none, &progress(false), &s),
        Some((T0 + 5_000, HedgeReason::ReceiptTimeout))
    );
    let fast = CandidateView {
        expected_receipt_p95_ms: 10,
        expected_first_token_p95_ms: 10,
        ..unknown
    };
    assert_eq!(
        hedge_trigger(&fast, &progress(false), &s),
        Some((T0 + 1_000, HedgeReason::FirstTokenTimeout))
    );
    assert_eq!(
        hedge_trigger(&fast, &progress(true), &s),
        Some((T0 + 1_000, HedgeReason::FirstTokenTimeout))
    );
    let slow_ttft = CandidateView {
        expected_first_token_p95_ms: 9_000,
        ..fast
    };
    assert_eq!(
        hedge_trigger(&slow_ttft, &progress(false), &s),
        Some((T0 + 1_500, HedgeReason::ReceiptTimeout))
    );
    let content = PrimaryProgress {
        got_first_content: true,
        ..progress(true)
    };
    assert_eq!(hedge_trigger(&fast, &content, &s), None);
    assert_eq!(
        hedge_decision(&fast, &content, &[host(1, 0)], true, &s, T0 + 9_999),
        HedgeDecision::NotNeeded
    );
}

/// Chaos invariant 3 (the 2 s recovery probe after a clear, seed 12): the first request after a
/// fault cleared landed on the host that had been refusing connections; its attempt first taught
/// it the missed diffs (4 chunks, 2.4 s in a debug build), and the hedge waited for the primary's
/// usual receipt p95 (≈ 5 s without data). A primary that is catching up is now hedged at once,
/// to the next caught-up host even if it is usually slower, until its receipt.
#[test]
fn a_primary_catching_up_is_hedged_at_once_until_its_receipt() {
    let s = settings();
    let primary = host(100, 0);
    let catching_up = PrimaryProgress {
        catching_up: true,
        ..progress(false)
    };
    assert_eq!(
        hedge_trigger(&primary, &catching_up, &s),
        Some((T0, HedgeReason::PrimaryCatchingUp))
    );
    let slower = [host(900, 0)];
    assert_eq!(
        hedge_decision(&primary, &catching_up, &slower, true, &s, T0),
        HedgeDecision::Hedge {
            target_index: 0,
            reason: HedgeReason::PrimaryCatchingUp,
            skip_nonces: 0
        }
    );
    assert_eq!(
        hedge_decision(&primary, &progress(false), &slower, true, &s, T0),
        HedgeDecision::Wait {
            until_ms: T0 + 1_000
        },
        "a caught-up primary waits for its usual trigger"
    );
    let caught_up = PrimaryProgress {
        got_receipt: true,
        ..catching_up
    };
    assert_eq!(
        hedge_trigger(&primary, &caught_up, &s),
        Some((T0 + 1_000, HedgeReason::FirstTokenTimeout)),
        "once its receipt came, the catch-up is over"
    );
}

#[test]
fn skipped_nonces_wait_for_other_requests_and_are_bounded() {
    let s = settings();
    let primary = host(800, 0);
    let hosts = [
        host(3_000, 0),
        host(100, 1),
        host(50, 3),
        CandidateView {
            in_race: true,
            ..host(10, 0)
        },
    ];
    let p = progress(true);
    let due = T0 + 1_600;
    assert_eq!(
        hedge_decision(&primary, &p, &hosts, true, &s, due),
        HedgeDecision::Wait {
            until_ms: due + 200
        }
    );
    assert_eq!(
        hedge_decision(&primary, &p, &hosts, true, &s, due + 200),
        HedgeDecision::Hedge {
            target_index: 1,
            reason: HedgeReason::FirstTokenTimeout,
            skip_nonces: 1
        }
    );
    assert_eq!(
        hedge_decision(&primary, &p, &hosts, false, &s, due + 200),
        HedgeDecision::Skip {
            reason: SkipReason::Budget
        }
    );
    let third = PrimaryProgress { attempts: 3, ..p };
    assert_eq!(
        hedge_decision(&primary, &third, &hosts, true, &s, due + 200),
        HedgeDecision::Skip {
            reason: SkipReason::MaxAttempts
        }
    );
}

fn attempt(preference: Preference, content: Option<i64>, running: bool) -> AttemptView {
    AttemptView {
        preference,
        first_content_ms: content,
        running,
    }
}

#[test]
fn seed_000_probation_hosts_with_content_are_crowned_when_no_healthy_host_runs() {
    let s = settings();
    // Every host of the escrow on probation after a mass unquarantine; all produce content.
    let all_doubtful = [
        attempt(Preference::Doubtful, Some(T0 + 300), true),
        attempt(Preference::Doubtful, Some(T0 + 200), true),
        attempt(Preference::Doubtful, None, true),
    ];
    assert_eq!(
        choose_winner(&all_doubtful, &s, T0 + 200),
        CrownDecision::Crown { index: 1 }
    );
    // A Healthy attempt still running without content holds the doubtful winner for 500 ms only.
    let mixed = [
        attempt(Preference::Healthy, None, true),
        attempt(Preference::Doubtful, Some(T0 + 200), true),
    ];
    assert_eq!(
        choose_winner(&mixed, &s, T0 + 200),
        CrownDecision::HoldUntil {
            index: 1,
            until_ms: T0 + 700
        }
    );
    assert_eq!(
        choose_winner(&mixed, &s, T0 + 700),
        CrownDecision::Crown { index: 1 }
    );
    // Healthy content wins over earlier doubtful content; no content, no crown.
    let both = [
        attempt(Preference::Doubtful, Some(T0 + 100), true),
        attempt(Preference::Healthy, Some(T0 + 400), true),
    ];
    assert_eq!(
        choose_winner(&both, &s, T0 + 400),
        CrownDecision::Crown { index: 1 }
    );
    assert_eq!(
        choose_winner(&[attempt(Preference::Healthy, None, true)], &s, T0),
        CrownDecision::NoContent
    );
}

fn candidate() -> impl Strategy<Value = CandidateView> {
    (
        0u32..5,
        1i64..6_000,
        1i64..6_000,
        any::<bool>(),
        0u8..3,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(skip, receipt, ttft, unresponsive, pref, routable, in_race)| CandidateView {
                skip_nonces: skip,
                expected_receipt_p95_ms: receipt,
                expected_first_token_ms: ttft,
                expected_first_token_p95_ms: ttft * 2,
                unresponsive,
                preference: [
                    Preference::Healthy,
                    Preference::Doubtful,
                    Preference::Ejected,
                ][pref as usize],
                routable,
                in_race,
            },
        )
}

proptest! {
    #![proptest_config(config(256, 0x5eed_0004))]

    /// Invariant 7: hedges ≤ hedge_budget × requests + hedge_burst over any run.
    #[test]
    fn hedges_stay_within_the_budget(
        ops in prop::collection::vec(prop::bool::weighted(0.3), 1..2_000),
        budget in 0.0f64..=1.0, burst in 0.0f64..20.0,
    ) {
        let s = HealthSettings { hedge_budget: budget, hedge_burst: burst, ..HealthSettings::default() };
        let mut b = HedgeBudget::new(&s);
        for request in ops {
            if request { b.on_request(&s) } else { let _ = b.try_spend(); }
            prop_assert!(b.hedges as f64 <= budget * b.requests as f64 + burst + 1e-9);
        }
    }

    /// Every hedge respects the trigger, the budget, `max_attempts`, the skip bound and the
    /// "faster than the primary's remaining time" rule.
    #[test]
    fn hedge_targets_obey_the_rules(
        primary in candidate(), hosts in prop::collection::vec(candidate(), 0..6),
        got_receipt in any::<bool>(), attempts in 1u32..4, budget in any::<bool>(), dt in 0i64..12_000,
    ) {
        let s = settings();
        let p = PrimaryProgress { sent_ms: T0, got_receipt, got_first_content: false, attempts, catching_up: false };
        let now = T0 + dt;
        let (due, reason) = hedge_trigger(&primary, &p, &s).unwrap();
        match hedge_decision(&primary, &p, &hosts, budget, &s, now) {
            HedgeDecision::Hedge { target_index, reason: r, skip_nonces } => {
                let c = hosts[target_index];
                prop_assert!(budget && attempts < s.max_attempts && now >= due && r == reason);
                prop_assert!(c.routable && !c.in_race && c.preference != Preference::Ejected);
                prop_assert!(skip_nonces == c.skip_nonces && skip_nonces <= s.hedge_max_skip_nonces);
                prop_assert!(skip_nonces == 0 || now >= due + s.hedge_target_wait_ms);
                prop_assert!(primary.unresponsive || c.expected_first_token_ms < dt.max(primary.expected_first_token_ms - dt));
            }
            HedgeDecision::Wait { until_ms } => prop_assert!(until_ms > now),
            HedgeDecision::Skip { reason: SkipReason::Budget } => prop_assert!(!budget),
            HedgeDecision::Skip { .. } => prop_assert!(now >= due),
            HedgeDecision::NotNeeded => prop_assert!(false, "no content yet"),
        }
    }

    /// Invariant 4 (liveness): if any attempt has content, it is crowned now or within
    /// `suspect_hold_ms` of its content, and Healthy content is crowned at once.
    #[test]
    fn content_is_always_crowned_within_the_hold(
        raw in prop::collection::vec((0u8..3, prop::option::of(0i64..5_000), any::<bool>()), 1..6),
        dt in 0i64..6_000,
    ) {
        let s = settings();
        let attempts: Vec<AttemptView> = raw.iter().map(|&(p, c, running)| AttemptView {
            preference: [Preference::Healthy, Preference::Doubtful, Preference::Ejected][p as usize],
            first_content_ms: c.map(|c| T0 + c),
            running,
        }).collect();
        let now = T0 + dt;
        let healthy_first = attempts.iter().enumerate()
            .filter(|(_, a)| a.preference == Preference::Healthy)
            .filter_map(|(i, a)| a.first_content_ms.map(|t| (t, i))).min();
        match choose_winner(&attempts, &s, now) {
            CrownDecision::NoContent => prop_assert!(attempts.iter().all(|a| a.first_content_ms.is_none())),
            CrownDecision::Crown { index } => {
                prop_assert!(attempts[index].first_content_ms.is_some());
                if let Some((_, i)) = healthy_first { prop_assert_eq!(index, i); }
            }
            CrownDecision::HoldUntil { index, until_ms } => {
                prop_assert!(healthy_first.is_none());
                let content = attempts[index].first_content_ms.unwrap();
                prop_assert!(until_ms > now && until_ms <= content + s.suspect_hold_ms);
                prop_assert_eq!(choose_winner(&attempts, &s, until_ms), CrownDecision::Crown { index });
            }
        }
    }
}
