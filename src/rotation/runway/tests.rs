use super::*;
use crate::rotation::plan::role;

fn rule(max_spares: u32) -> ModelRotation {
    ModelRotation {
        model: "m".into(),
        target_count: 1,
        amount: 100,
        max_deposit_per_day: 10_000,
        nonce_margin: 100,
        reserve_requests: 3,
        margin_s: 60,
        max_spares,
    }
}

/// Escrow `id` at `nonce` of a 4 000-nonce serving limit, burning `per_s`.
fn escrow(id: &str, nonce: u64, per_s: u64) -> EscrowFacts {
    EscrowFacts::for_test(id, (nonce, 4_000), 1_000_000, per_s)
}

fn runway_of(escrows: &[EscrowFacts], rule: &ModelRotation) -> Runway {
    let roles: Vec<Role> = escrows.iter().map(|e| role(e, rule)).collect();
    Runway::of(escrows, &roles, rule)
}

#[test]
fn seed12_an_escrow_that_lasts_less_than_the_margin_gets_spares_up_to_the_bound() {
    // Seed 12's rate: 250 nonces a second, a 4 000-nonce escrow lasts 16 s; 60 s need 15 000.
    let fresh = [escrow("1", 100, 250)];
    let r = runway_of(&fresh, &rule(2));
    assert_eq!((r.left, r.need, r.per_s), (3_900, 15_000, 250));
    assert_eq!(r.seconds(), Some(15));
    assert!(r.short(0) && r.short(2) && !r.short(3));
    assert!(r.wants_spare(&rule(2), 0));
    assert!(r.wants_spare(&rule(2), 1));
    // Target 1 + 2 spares: a third creation on its way is one too many.
    assert!(!r.wants_spare(&rule(2), 2));
    assert!(
        !r.wants_spare(&rule(0), 0),
        "no spares when the operator keeps none"
    );
    // Three serving, spread: still short, but at the bound.
    let three = [
        escrow("1", 3_000, 84),
        escrow("2", 1_500, 83),
        escrow("3", 200, 83),
    ];
    let r = runway_of(&three, &rule(2));
    assert_eq!(r.serving.len(), 3);
    assert!(r.short(0) && !r.wants_spare(&rule(2), 0));
}

#[test]
fn long_lived_escrows_need_no_spare_and_retire_as_before() {
    // 10 nonces a second: 600 in the margin, against 3 900 left.
    let r = runway_of(&[escrow("1", 100, 10)], &rule(2));
    assert!(!r.short(0) && !r.wants_spare(&rule(2), 0));
    // Low (within the 600 the margin needs) beside a fresh one: it retires.
    let r = runway_of(&[escrow("1", 3_500, 10), escrow("2", 0, 0)], &rule(2));
    assert_eq!(r.serving[0].role, Role::Low);
    assert_eq!(r.retirable(&rule(2)), ["1"]);
    // No rate measured yet: nothing is short, every low one retires.
    let r = runway_of(&[escrow("1", 3_950, 0), escrow("2", 0, 0)], &rule(2));
    assert_eq!((r.need, r.seconds()), (0, None));
    assert_eq!(r.retirable(&rule(2)), ["1"]);
}

#[test]
fn a_low_escrow_keeps_serving_while_the_others_do_not_cover_the_margin_without_it() {
    // 60 nonces a second in all: 3 600 in the margin.
    let escrows = [
        escrow("1", 3_700, 20), // low: 300 left
        escrow("2", 2_500, 20), // 1 500 left, low within 1 200: active
        escrow("3", 100, 20),   // fresh: 3 900 left
    ];
    let r = runway_of(&escrows, &rule(2));
    assert_eq!(r.serving[0].role, Role::Low);
    assert_eq!(r.need, 3_600);
    // 5 700 left; without "1" 5 400 ≥ 3 600: it retires.
    assert_eq!(r.retirable(&rule(2)), ["1"]);
    // At twice the rate (7 200 needed) no low one may go: they serve to their auto-settle margin.
    let hot: Vec<EscrowFacts> = escrows
        .iter()
        .map(|e| EscrowFacts {
            burn_per_s: 40,
            ..e.clone()
        })
        .collect();
    let r = runway_of(&hot, &rule(2));
    assert!(r.retirable(&rule(2)).is_empty(), "{r:?}");
    // Without spares a low escrow retires as soon as its replacement serves, as before.
    assert_eq!(r.retirable(&rule(0)), ["1", "2"]);
    // Several low ones: the emptiest go first, as long as the rest covers the margin.
    let lows = [
        escrow("1", 3_900, 5),
        escrow("2", 3_800, 5),
        escrow("3", 0, 5),
    ];
    let r = runway_of(&lows, &rule(2));
    assert_eq!(r.need, 900);
    assert_eq!(r.retirable(&rule(2)), ["1", "2"]);
}

#[test]
fn an_escrow_low_on_balance_counts_no_runway_and_may_always_retire() {
    let poor = EscrowFacts {
        spendable: 29,
        ..escrow("1", 100, 10)
    };
    let r = runway_of(&[poor, escrow("2", 0, 0)], &rule(2));
    assert_eq!(
        r.serving[0],
        Serving {
            escrow_id: "1".into(),
            role: Role::Low,
            left: 0,
        }
    );
    assert_eq!(r.left, 4_000);
    assert_eq!(r.retirable(&rule(2)), ["1"]);
    // A model with nothing left to serve from is dry.
    let r = runway_of(
        &[EscrowFacts {
            spendable: 0,
            ..escrow("1", 0, 5)
        }],
        &rule(2),
    );
    assert_eq!(r.left, 0);
}
