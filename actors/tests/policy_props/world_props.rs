//! Invariants 1 and 3 over random fault schedules, driven through the [`World`] model.

use devshard_actors::policy::{
    health::{is_routable, HealthState},
    settings::HealthSettings,
};
use proptest::prelude::*;

use super::{
    common::config,
    world::{Ev, World, FAULTS},
};

pub fn event(bursts: bool) -> impl Strategy<Value = Ev> {
    let burst_weight = if bursts { 2 } else { 0 };
    prop_oneof![
        3 => (1i64..120_000).prop_map(Ev::Advance),
        3 => (0usize..3, 0usize..6).prop_map(|(escrow, pick)| Ev::Success { escrow, pick }),
        6 => (0usize..3, 0usize..6, 0usize..FAULTS.len(), 0u32..100)
            .prop_map(|(escrow, pick, kind, num)| Ev::Fault { escrow, pick, kind, num }),
        burst_weight => (0usize..3, 0usize..9, 1i64..4_000)
            .prop_map(|(escrow, kind, gap)| Ev::Burst { escrow, kind, gap }),
    ]
}

/// 2–6 hosts and 1–3 escrows of at least two hosts each.
pub fn topology() -> impl Strategy<Value = (usize, Vec<Vec<usize>>)> {
    (2usize..=6).prop_flat_map(|n| {
        let escrow = (any::<u8>(), 0..n, 1..n).prop_map(move |(mask, a, off)| {
            let b = (a + off) % n;
            (0..n)
                .filter(|&i| i == a || i == b || mask & (1 << i) != 0)
                .collect::<Vec<_>>()
        });
        (Just(n), prop::collection::vec(escrow, 1..=3))
    })
}

proptest! {
    #![proptest_config(config(96, 0x5eed_0001))]

    /// Invariant 1: a fault returned by every attempted host within the window never produces a
    /// strike — with the guard consulted first, no burst failure is ever confirmed, and a world of
    /// bursts and successes keeps every host Healthy with zero strikes.
    #[test]
    fn shared_faults_never_strike(
        (n, escrows) in topology(),
        events in prop::collection::vec(event(true), 1..120),
        only_shared in any::<bool>(),
    ) {
        let mut w = World::new(HealthSettings::default(), n, escrows);
        for ev in &events {
            if only_shared && matches!(ev, Ev::Fault { .. }) {
                continue;
            }
            w.step(ev);
        }
        w.step(&Ev::Advance(3_600_000));
        for fault in &w.confirmed {
            prop_assert!(!w.burst_failures.contains(&(fault.host, fault.at_ms)), "{fault:?}");
        }
        if only_shared {
            prop_assert!(w.confirmed.is_empty());
            for h in &w.hosts {
                prop_assert_eq!(h, &HealthState::default());
            }
        }
    }

    /// Invariant 3: ejections never leave an escrow below the floor without peer evidence, and
    /// never with zero routable hosts (checked inside every step).
    #[test]
    fn ejections_respect_the_floor(
        (n, escrows) in topology(),
        events in prop::collection::vec(event(false), 1..200),
        fraction in prop::sample::select(vec![0.0, 0.34, 0.5, 0.75, 1.0]),
        eject_strikes in prop::sample::select(vec![1.0, 2.0, 3.0]),
    ) {
        let settings = HealthSettings {
            min_routable_fraction: fraction,
            eject_strikes,
            ..HealthSettings::default()
        };
        let mut w = World::new(settings, n, escrows);
        for ev in &events {
            w.step(ev);
        }
    }
}

#[test]
fn the_model_does_eject_when_allowed() {
    // Sanity check of the harness: a host failing alone while its peers succeed is ejected.
    let mut w = World::new(HealthSettings::default(), 4, vec![vec![0, 1, 2, 3]]);
    for _ in 0..3 {
        w.step(&Ev::Success { escrow: 0, pick: 1 });
        w.step(&Ev::Fault {
            escrow: 0,
            pick: 0,
            kind: 0,
            num: 0,
        });
        w.step(&Ev::Success { escrow: 0, pick: 2 });
        w.step(&Ev::Advance(1_000));
    }
    assert_eq!(w.ejections, 1);
    assert!(!is_routable(&w.hosts[0], w.now));
}
