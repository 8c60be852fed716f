//! Pure decisions of the rotation (docs/lifecycle.md §4): each escrow's role, whether a model
//! needs a new escrow now (within its daily cap, outside its back-off), which running-low escrows
//! may retire (only once enough healthy ones serve), the back-off delay and the UTC day.

use serde::Serialize;

use super::{remote::BudgetSource, runway::Runway, settings::ModelRotation};

/// What the rotation knows of one registered escrow of a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EscrowFacts {
    pub escrow_id: String,
    pub nonce: u64,
    /// Last nonce that may serve (`max_nonce − (N + 1)`).
    pub serving_limit: u64,
    /// Balance minus what requests on their way reserved.
    pub spendable: u64,
    /// Reserved cost of one worst-case request.
    pub worst_cost: u64,
    /// A settlement record exists (draining … settled).
    pub closed: bool,
    pub settled: bool,
    /// When the settlement record turned `settled` (its `updated_ms`: nothing writes a settled
    /// record again); `None` unless `settled`.
    pub settled_at_ms: Option<i64>,
    /// Deactivated by an admin.
    pub deactivated: bool,
    /// `false`: the budget is not known (another replica runs the escrow and has not published
    /// it for too long; `super::remote`).
    pub budget_known: bool,
    /// Where the budget came from.
    pub source: BudgetSource,
    /// Nonces it uses per second lately (`super::burn`; 0 until measured).
    pub burn_per_s: u64,
}

#[cfg(test)]
impl EscrowFacts {
    /// A live, open escrow `id` at `nonce` of `serving_limit`, its worst-case request 10.
    pub(crate) fn for_test(
        id: &str,
        (nonce, serving_limit): (u64, u64),
        spendable: u64,
        burn_per_s: u64,
    ) -> EscrowFacts {
        EscrowFacts {
            escrow_id: id.into(),
            nonce,
            serving_limit,
            spendable,
            worst_cost: 10,
            closed: false,
            settled: false,
            settled_at_ms: None,
            deactivated: false,
            budget_known: true,
            source: BudgetSource::Live,
            burn_per_s,
        }
    }
}

/// An escrow's role in the rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Serves, with room left.
    Active,
    /// Serves, but needs a replacement (balance or nonces within the margin).
    Low,
    /// No new requests: draining and settling.
    Retiring,
    Settled,
    /// Deactivated by an admin (not counted, not retired).
    Inactive,
    /// Its budget is not known (its owner stopped publishing it): not counted as active, not
    /// retired.
    Unknown,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Low => "low",
            Role::Retiring => "retiring",
            Role::Settled => "settled",
            Role::Inactive => "inactive",
            Role::Unknown => "unknown",
        }
    }
}

/// The role of `e` under `rule`.
pub fn role(e: &EscrowFacts, rule: &ModelRotation) -> Role {
    if e.settled {
        return Role::Settled;
    }
    if e.closed {
        return Role::Retiring;
    }
    if e.deactivated {
        return Role::Inactive;
    }
    if !e.budget_known {
        return Role::Unknown;
    }
    let nonces_left = e.serving_limit.saturating_sub(e.nonce);
    let reserve = e.worst_cost.saturating_mul(rule.reserve_requests);
    if nonces_left <= nonce_margin(e, rule) || e.spendable < reserve {
        Role::Low
    } else {
        Role::Active
    }
}

/// The nonces left at which `e` runs low: `nonce_margin`, or what it uses in `margin_s` at its
/// recent rate, whichever is more, but never more than half its serving limit (a fresh escrow
/// that would last less than `margin_s` is still active, or each replacement would ask for
/// another at once).
pub fn nonce_margin(e: &EscrowFacts, rule: &ModelRotation) -> u64 {
    let by_time = e.burn_per_s.saturating_mul(rule.margin_s);
    rule.nonce_margin.max(by_time.min(e.serving_limit / 2))
}

/// Whether a model gets a new escrow now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Create {
    /// Enough active escrows (and creations on their way), and a runway that covers `margin_s`
    /// or `max_spares` spares already.
    NotNeeded,
    Now {
        why: Why,
    },
    /// The deposit would go past `max_deposit_per_day`.
    CapReached {
        deposited_today: u64,
        cap: u64,
    },
    /// An earlier creation failed; the next try waits.
    BackingOff {
        until_ms: i64,
    },
}

/// Why a creation is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Fewer than `target_count` escrows are active (not low).
    Target,
    /// The serving escrows last less than `margin_s` at the model's rate ([`Runway`]).
    Spare,
}

impl Why {
    pub fn label(self) -> &'static str {
        match self {
            Why::Target => "target",
            Why::Spare => "spare",
        }
    }
}

/// What one check decides for one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub create: Create,
    /// Running-low escrows to drain and settle (their replacements serve).
    pub retire: Vec<String>,
}

/// The decision for `rule` given the model's runway (its serving escrows and their roles) and
/// the creations still pending. Low escrows retire once `target_count` escrows are active, and
/// (with spares) only while the others cover the runway without them ([`Runway::retirable`]).
pub fn decide(
    rule: &ModelRotation,
    runway: &Runway,
    pending: u32,
    deposited_today: u64,
    now_ms: i64,
    backoff_until_ms: i64,
) -> Decision {
    let active = runway
        .serving
        .iter()
        .filter(|s| s.role == Role::Active)
        .count() as u64;
    let target = u64::from(rule.target_count);
    let retire = if active >= target {
        runway.retirable(rule)
    } else {
        Vec::new()
    };
    let why = if active + u64::from(pending) < target {
        Some(Why::Target)
    } else if runway.wants_spare(rule, pending) {
        Some(Why::Spare)
    } else {
        None
    };
    let create = match why {
        None => Create::NotNeeded,
        Some(_) if deposited_today.saturating_add(rule.amount) > rule.max_deposit_per_day => {
            Create::CapReached {
                deposited_today,
                cap: rule.max_deposit_per_day,
            }
        }
        Some(_) if now_ms < backoff_until_ms => Create::BackingOff {
            until_ms: backoff_until_ms,
        },
        Some(why) => Create::Now { why },
    };
    Decision { create, retire }
}

/// The back-off of failed creations (`rotation.backoff_first_ms`, `backoff_max_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delays {
    pub first_ms: u64,
    pub max_ms: u64,
}

/// When a model's next creation may start: `failed_at_ms` (its last failure) plus
/// [`creation_wait`], judged with `dry` as it stands now, so a model that ran dry during a long
/// back-off tries again at once once its first delay has passed; 0 without failures.
pub fn retry_at(failures: u32, failed_at_ms: i64, dry: bool, delays: Delays) -> i64 {
    if failures == 0 {
        return 0;
    }
    let wait = creation_wait(failures, dry, delays.first_ms, delays.max_ms);
    failed_at_ms.saturating_add(i64::try_from(wait).unwrap_or(i64::MAX))
}

/// How long a model's creations wait after `failures` failures in a row: `first · 2^(failures−1)`
/// capped at `max`, but never past `first` while the model is dry (nothing it could serve from:
/// every request meets 503 until a creation lands, so the chain is tried again soon).
pub fn creation_wait(failures: u32, dry: bool, first: u64, max: u64) -> u64 {
    let wait = backoff_ms(failures, first, max);
    if dry {
        wait.min(first)
    } else {
        wait
    }
}

/// `first · 2^(failures−1)`, capped at `max` (0 failures: no wait).
pub fn backoff_ms(failures: u32, first: u64, max: u64) -> u64 {
    if failures == 0 {
        return 0;
    }
    let shift = (failures - 1).min(20);
    first.saturating_mul(1u64 << shift).min(max)
}

/// The UTC day of a unix time in milliseconds (days since 1970-01-01).
pub fn utc_day(unix_ms: i64) -> i64 {
    unix_ms.div_euclid(86_400_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::runway::Serving;

    fn rule() -> ModelRotation {
        ModelRotation {
            model: "m".into(),
            target_count: 1,
            amount: 100,
            max_deposit_per_day: 250,
            nonce_margin: 10,
            reserve_requests: 3,
            margin_s: 5,
            max_spares: 0,
        }
    }

    /// A runway of escrows with these roles, 50 nonces left each, no burn measured.
    fn runway(roles: &[(&str, Role)]) -> Runway {
        let serving: Vec<Serving> = roles
            .iter()
            .map(|(id, role)| Serving {
                escrow_id: (*id).to_owned(),
                role: *role,
                left: 50,
            })
            .collect();
        Runway {
            left: 50 * serving.len() as u64,
            serving,
            per_s: 0,
            need: 0,
            fresh: 100,
        }
    }

    fn facts(nonce: u64, spendable: u64) -> EscrowFacts {
        EscrowFacts::for_test("1", (nonce, 100), spendable, 0)
    }

    #[test]
    fn an_escrow_runs_low_on_nonces_or_on_balance_before_it_is_exhausted() {
        assert_eq!(role(&facts(89, 30), &rule()), Role::Active);
        assert_eq!(role(&facts(90, 30), &rule()), Role::Low);
        assert_eq!(role(&facts(1, 29), &rule()), Role::Low);
        let closed = EscrowFacts {
            closed: true,
            ..facts(1, 1_000)
        };
        assert_eq!(role(&closed, &rule()), Role::Retiring);
        let unknown = EscrowFacts {
            budget_known: false,
            ..facts(95, 1)
        };
        assert_eq!(role(&unknown, &rule()), Role::Unknown);
    }

    #[test]
    fn a_fast_burning_escrow_runs_low_by_time_but_never_past_half_its_nonces() {
        // 4 nonces a second for 5 s: low with 20 nonces left, not 10.
        let burning = |nonce| EscrowFacts {
            burn_per_s: 4,
            ..facts(nonce, 1_000)
        };
        assert_eq!(role(&burning(79), &rule()), Role::Active);
        assert_eq!(role(&burning(80), &rule()), Role::Low);
        // 100 a second would be 500 nonces: capped at half the serving limit (50).
        let racing = |nonce| EscrowFacts {
            burn_per_s: 100,
            ..facts(nonce, 1_000)
        };
        assert_eq!(role(&racing(49), &rule()), Role::Active);
        assert_eq!(role(&racing(50), &rule()), Role::Low);
    }

    #[test]
    fn the_replacement_comes_first_and_the_low_escrow_retires_after() {
        let now = Create::Now { why: Why::Target };
        let low = runway(&[("1", Role::Low)]);
        let d = decide(&rule(), &low, 0, 0, 0, 0);
        assert_eq!(d.create, now);
        assert!(d.retire.is_empty(), "no replacement serves yet");
        // Pending creation: not created twice.
        assert_eq!(decide(&rule(), &low, 1, 0, 0, 0).create, Create::NotNeeded);
        let both = runway(&[("1", Role::Low), ("2", Role::Active)]);
        let d = decide(&rule(), &both, 0, 100, 0, 0);
        assert_eq!(d.create, Create::NotNeeded);
        assert_eq!(d.retire, ["1"]);
        // An escrow whose budget is unknown is not serving: it neither covers the target nor
        // retires.
        let d = decide(&rule(), &runway(&[]), 0, 0, 0, 0);
        assert_eq!((d.create, d.retire.len()), (now, 0));
    }

    #[test]
    fn the_daily_cap_and_the_back_off_hold_creations() {
        let none = runway(&[]);
        assert_eq!(
            decide(&rule(), &none, 0, 150, 0, 0).create,
            Create::Now { why: Why::Target }
        );
        assert_eq!(
            decide(&rule(), &none, 0, 151, 0, 0).create,
            Create::CapReached {
                deposited_today: 151,
                cap: 250
            }
        );
        assert_eq!(
            decide(&rule(), &none, 0, 0, 5, 9).create,
            Create::BackingOff { until_ms: 9 }
        );
        assert_eq!(backoff_ms(0, 5, 60), 0);
        assert_eq!(backoff_ms(1, 5, 60), 5);
        assert_eq!(backoff_ms(3, 5, 60), 20);
        assert_eq!(backoff_ms(30, 5, 60), 60);
        // A dry model tries again after the first delay, however many failures.
        assert_eq!(creation_wait(3, false, 5, 60), 20);
        assert_eq!(creation_wait(3, true, 5, 60), 5);
        assert_eq!(creation_wait(0, true, 5, 60), 0);
        // Judged as the model stands now: it ran dry during a 20 ms wait begun at 100.
        let delays = Delays {
            first_ms: 5,
            max_ms: 60,
        };
        assert_eq!(retry_at(3, 100, false, delays), 120);
        assert_eq!(retry_at(3, 100, true, delays), 105);
        assert_eq!(retry_at(0, 100, true, delays), 0);
        assert_eq!(utc_day(86_400_000 - 1), 0);
        assert_eq!(utc_day(86_400_000), 1);
    }
}
