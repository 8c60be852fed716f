//! The participant health state machine: ejection duration and deadlines, probation, level decay,
//! admin actions, and the time properties of strikes and `tick`.

use devshard_actors::{
    outcome::OutcomeClass,
    policy::health::{
        decayed_strikes, ejection_duration_ms, forget, is_routable, next_deadline, on_outcome,
        panic_order, preference, tick, unquarantine, EjectionContext, EscrowView, HealthEffect,
        HealthState, HealthStatus, OutcomeFacts, Preference, SuppressReason,
    },
    policy::reason::OutcomeReason,
};
use proptest::prelude::*;

use super::common::{config, settings, T0};

/// A big escrow with peers succeeding: nothing stops an ejection.
fn permissive() -> EjectionContext {
    EjectionContext {
        escrows: vec![EscrowView {
            distinct: 10,
            routable: 10,
            peer_success_recent: true,
        }],
        gateway_has_any_success: true,
    }
}

fn fault() -> OutcomeFacts {
    OutcomeFacts::new(OutcomeClass::HostFault, OutcomeReason::ConnectFailed)
}

fn success() -> OutcomeFacts {
    OutcomeFacts::new(OutcomeClass::Success, OutcomeReason::Finished)
}

fn apply(s: &HealthState, facts: &OutcomeFacts, now: i64) -> (HealthState, Vec<HealthEffect>) {
    on_outcome(s, facts, &permissive(), &settings(), now, 0.0)
}

/// Three strikes a second apart eject (decayed 2.98 rounds to 3).
fn eject(s: &HealthState, now: i64) -> HealthState {
    let mut s = s.clone();
    for i in 0..3 {
        s = apply(&s, &fault(), now + i * 1_000).0;
    }
    assert!(matches!(s.state, HealthStatus::Ejected { .. }), "{s:?}");
    s
}

#[test]
fn ejection_doubles_per_level_is_capped_and_jittered() {
    let s = settings();
    let plain: Vec<i64> = (0..9).map(|l| ejection_duration_ms(l, &s, 0.0)).collect();
    assert_eq!(
        plain,
        [30_000, 60_000, 120_000, 240_000, 480_000, 960_000, 1_800_000, 1_800_000, 1_800_000]
    );
    assert_eq!(ejection_duration_ms(0, &s, 1.0), 36_000);
    assert_eq!(ejection_duration_ms(0, &s, -1.0), 24_000);
    assert_eq!(
        ejection_duration_ms(200, &s, 5.0),
        2_160_000,
        "draw clamped to 1"
    );
    assert_eq!(ejection_duration_ms(1, &s, f64::NAN), 60_000);
}

#[test]
fn one_strike_suspects_three_eject_and_levels_grow() {
    let (s1, effects) = apply(&HealthState::default(), &fault(), T0);
    assert_eq!(s1.state, HealthStatus::Suspect);
    assert_eq!(effects, [HealthEffect::BecameSuspect]);
    assert!(is_routable(&s1, T0));
    assert_eq!(preference(&s1), Preference::Doubtful);

    let s = eject(&HealthState::default(), T0);
    assert_eq!(
        s.state,
        HealthStatus::Ejected {
            until_ms: T0 + 2_000 + 30_000,
            level: 0
        }
    );
    assert_eq!((s.level, s.ejections), (1, 1));
    assert!(!is_routable(&s, T0 + 31_999) && is_routable(&s, T0 + 32_000));

    // Expiry → probation; a host fault on probation re-ejects at once, for twice as long.
    let (p, effects) = tick(&s, &settings(), T0 + 40_000);
    assert_eq!(effects, [HealthEffect::ProbationStarted]);
    assert_eq!(
        p.state,
        HealthStatus::Probation {
            remaining: 2,
            since_ms: T0 + 32_000
        }
    );
    let (again, _) = apply(&p, &fault(), T0 + 41_000);
    assert_eq!(
        again.state,
        HealthStatus::Ejected {
            until_ms: T0 + 101_000,
            level: 1
        }
    );
    assert_eq!(again.level, 2);
}

#[test]
fn strikes_eject_when_their_decayed_sum_rounds_to_eject_strikes() {
    let spaced = |gap: i64| {
        (0..3).fold(HealthState::default(), |s, i| {
            apply(&s, &fault(), T0 + i * gap).0
        })
    };
    assert!(matches!(spaced(33_000).state, HealthStatus::Ejected { .. }));
    assert_eq!(spaced(35_000).state, HealthStatus::Suspect);
    assert_eq!(spaced(3_600_000).state, HealthStatus::Suspect);
}

#[test]
fn a_later_shorter_ejection_never_shortens_the_deadline() {
    let mut s = HealthState {
        level: 6,
        level_since_ms: T0,
        ..HealthState::default()
    };
    s = eject(&s, T0);
    let HealthStatus::Ejected { until_ms: long, .. } = s.state else {
        panic!()
    };
    assert_eq!(long, T0 + 2_000 + 1_800_000);
    // A byzantine fault while ejected, computed at a lower level, keeps the longer deadline.
    s.level = 0;
    let byz = OutcomeFacts::new(OutcomeClass::HostFault, OutcomeReason::InvalidReceipt);
    let (s2, effects) = apply(&s, &byz, T0 + 5_000);
    assert_eq!(
        effects,
        [HealthEffect::Ejected {
            until_ms: long,
            level: 0
        }]
    );
    assert_eq!(s2.ejections, s.ejections);
}

#[test]
fn byzantine_and_stalled_winners_eject_at_once_other_classes_do_nothing() {
    let fresh = HealthState::default();
    let byz = OutcomeFacts::new(OutcomeClass::HostFault, OutcomeReason::InvalidStateSig);
    assert!(matches!(
        apply(&fresh, &byz, T0).0.state,
        HealthStatus::Ejected { .. }
    ));
    let stalled = OutcomeFacts {
        winner: true,
        ..OutcomeFacts::new(OutcomeClass::HostFault, OutcomeReason::Stalled)
    };
    assert!(matches!(
        apply(&fresh, &stalled, T0).0.state,
        HealthStatus::Ejected { .. }
    ));
    let stalled_loser = OutcomeFacts::new(OutcomeClass::HostFault, OutcomeReason::Stalled);
    assert_eq!(
        apply(&fresh, &stalled_loser, T0).0.state,
        HealthStatus::Suspect
    );
    let shared = OutcomeFacts {
        shared: true,
        ..byz
    };
    assert_eq!(apply(&fresh, &shared, T0).0, fresh);
    for class in [
        OutcomeClass::Overload,
        OutcomeClass::EscrowFault,
        OutcomeClass::GatewayFault,
        OutcomeClass::RequestFault,
        OutcomeClass::Diverged,
        OutcomeClass::Cancelled,
        OutcomeClass::PendingFinish,
    ] {
        assert_eq!(
            apply(
                &fresh,
                &OutcomeFacts::new(class, OutcomeReason::HostError),
                T0
            )
            .0,
            fresh,
            "{class:?}"
        );
    }
}

#[test]
fn floor_and_relative_evidence_suppress_ejections() {
    let s = settings();
    let mut suspect = HealthState::default();
    for i in 0..2 {
        suspect = apply(&suspect, &fault(), T0 + i).0;
    }
    let two_hosts_one_out = EjectionContext {
        escrows: vec![EscrowView {
            distinct: 2,
            routable: 1,
            peer_success_recent: false,
        }],
        gateway_has_any_success: true,
    };
    let (s1, effects) = on_outcome(&suspect, &fault(), &two_hosts_one_out, &s, T0 + 2, 0.0);
    assert_eq!(
        effects,
        [HealthEffect::EjectionSuppressed {
            reason: SuppressReason::Floor
        }]
    );
    assert_eq!(s1.state, HealthStatus::Suspect);
    // Peers succeeding do not override the hard floor (the last routable host stays).
    let mut last = two_hosts_one_out.clone();
    last.escrows[0].peer_success_recent = true;
    assert!(on_outcome(&suspect, &fault(), &last, &s, T0 + 2, 0.0)
        .1
        .contains(&HealthEffect::EjectionSuppressed {
            reason: SuppressReason::Floor
        }));
    // Plenty of hosts, but no peer succeeded lately while the gateway has successes elsewhere.
    let quiet = EjectionContext {
        escrows: vec![EscrowView {
            distinct: 6,
            routable: 6,
            peer_success_recent: false,
        }],
        gateway_has_any_success: true,
    };
    let (_, effects) = on_outcome(&suspect, &fault(), &quiet, &s, T0 + 2, 0.0);
    assert_eq!(
        effects,
        [HealthEffect::EjectionSuppressed {
            reason: SuppressReason::NoPeerEvidence
        }]
    );
    // Fresh start (no success anywhere yet): ejections are allowed.
    let fresh = EjectionContext {
        gateway_has_any_success: false,
        ..quiet
    };
    assert!(matches!(
        on_outcome(&suspect, &fault(), &fresh, &s, T0 + 2, 0.0)
            .0
            .state,
        HealthStatus::Ejected { .. }
    ));
}

#[test]
fn probation_ends_by_successes_or_by_time_and_levels_decay() {
    let s = settings();
    let ejected = eject(&HealthState::default(), T0);
    let (p, _) = tick(&ejected, &s, T0 + 60_000);
    let (p1, e1) = apply(&p, &success(), T0 + 61_000);
    assert_eq!(e1, []);
    let (healthy, e2) = apply(&p1, &success(), T0 + 62_000);
    assert_eq!(e2, [HealthEffect::BecameHealthy]);
    assert_eq!(
        (healthy.state, healthy.strikes, healthy.level),
        (HealthStatus::Healthy, 0.0, 1)
    );
    assert_eq!(next_deadline(&healthy, &s), Some(T0 + 62_000 + 600_000));
    let (lowered, effects) = tick(&healthy, &s, T0 + 662_000);
    assert_eq!(lowered.level, 0);
    assert_eq!(effects, [HealthEffect::LevelLowered { level: 0 }]);
    assert_eq!(next_deadline(&lowered, &s), None);
    // Never crowned, never succeeding: probation still ends after probation_max_ms.
    let (by_time, effects) = tick(&p, &s, T0 + 32_000 + 900_000);
    assert_eq!(by_time.state, HealthStatus::Healthy);
    assert_eq!(effects, [HealthEffect::BecameHealthy]);
}

#[test]
fn unquarantine_starts_probation_and_forget_clears_everything() {
    let s = settings();
    let ejected = eject(
        &HealthState {
            level: 3,
            level_since_ms: T0,
            ..HealthState::default()
        },
        T0,
    );
    let u = unquarantine(&ejected, &s, T0 + 10_000);
    assert_eq!(
        u.state,
        HealthStatus::Probation {
            remaining: 2,
            since_ms: T0 + 10_000
        }
    );
    assert!(is_routable(&u, T0 + 10_000));
    assert_eq!(u.level, 4, "the level remembers the offence");
    assert_eq!(unquarantine(&u, &s, T0 + 20_000), u, "idempotent");
    let f = forget();
    assert_eq!(f, HealthState::default());
    assert_eq!(
        (preference(&f), next_deadline(&f, &s)),
        (Preference::Healthy, None)
    );
}

#[test]
fn panic_mode_races_the_least_bad_first() {
    let s = settings();
    let clean = HealthState::default();
    let struck = apply(&clean, &fault(), T0).0;
    let out_long = HealthState {
        state: HealthStatus::Ejected {
            until_ms: T0 + 90_000,
            level: 1,
        },
        ..clean.clone()
    };
    let out_short = HealthState {
        state: HealthStatus::Ejected {
            until_ms: T0 + 30_000,
            level: 0,
        },
        ..clean.clone()
    };
    let order = panic_order(&[&struck, &out_long, &out_short, &clean], &s, T0 + 1_000);
    assert_eq!(order, [3, 2, 1, 0]);
}

/// A state reached by a random sequence of outcomes and ticks.
fn state_after(ops: &[(u8, i64)]) -> (HealthState, i64) {
    let mut s = HealthState::default();
    let mut now = T0;
    for &(op, dt) in ops {
        now += dt;
        s = match op % 4 {
            0 | 1 => apply(&s, &fault(), now).0,
            2 => apply(&s, &success(), now).0,
            _ => tick(&s, &settings(), now).0,
        };
    }
    (s, now)
}

proptest! {
    #![proptest_config(config(128, 0x5eed_0002))]

    /// Ticking late or often gives the same state; nothing happens before `next_deadline`.
    #[test]
    fn tick_is_frequency_independent(
        ops in prop::collection::vec((any::<u8>(), 0i64..200_000), 0..40),
        d1 in 0i64..4_000_000, d2 in 0i64..4_000_000,
    ) {
        let s = settings();
        let (state, now) = state_after(&ops);
        let (t1, t2) = (now + d1.min(d2), now + d1.max(d2));
        let direct = tick(&state, &s, t2).0;
        let stepped = tick(&tick(&state, &s, t1).0, &s, t2).0;
        prop_assert_eq!(&direct, &stepped);
        if let Some(deadline) = next_deadline(&state, &s) {
            if deadline > now {
                prop_assert_eq!(tick(&state, &s, deadline - 1).0, state.clone());
            }
            prop_assert_ne!(tick(&state, &s, deadline.max(now)).0, state);
        }
    }

    /// Strike weight never grows with age and halves every half-life.
    #[test]
    fn strikes_decay_monotonically(
        ops in prop::collection::vec((any::<u8>(), 0i64..200_000), 1..30),
        steps in prop::collection::vec(1i64..100_000, 1..50),
    ) {
        let s = settings();
        let (state, mut now) = state_after(&ops);
        let mut prev = decayed_strikes(&state, &s, now);
        for dt in steps {
            now += dt;
            let w = decayed_strikes(&state, &s, now);
            prop_assert!(w <= prev && w >= 0.0);
            prop_assert!((decayed_strikes(&state, &s, now + 120_000) - w / 2.0).abs() < 1e-9);
            prev = w;
        }
    }
}
