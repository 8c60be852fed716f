//! The budget of an escrow another replica runs, as the rotation's leader estimates it (pure).
//!
//! Inputs: the owner's last publication (`escrow_budgets`: nonce and spendable balance, with
//! its age by the database's clock) and the escrow's durable nonce (the last diff of its log,
//! which is at least every nonce any host or client has seen: a diff is durable before it is
//! visible).
//!
//! - The **nonce** is the larger of the published and the durable one: exact up to the diffs
//!   in flight, whatever the publication's age.
//! - The **spendable balance** is the published one less one worst-case request for every nonce
//!   the publication has not seen yet (a lower bound: never more than the escrow has).
//! - A publication older than `stale_after` (3 lease TTLs) is **stale**: its owner has stopped
//!   publishing (dead, cut off from the database, or nobody owns the escrow). Such an escrow's
//!   budget is **unknown** once this leader has led for `stale_after` itself (every live owner
//!   has published by then, also after a whole-cluster restart): the rotation does not count it
//!   as active, so a replacement comes if the others do not cover the target, and never retires
//!   it on these figures (its owner's auto-settle still guards it). Before that its estimate
//!   counts.
//! - Never published: nonce 0 (no diff) is an escrow nobody has served, exactly its registered
//!   budget; with diffs (served before its owner's first publication, or by a replica that does
//!   not publish) the registered budget less one worst-case request per durable nonce.

use serde::Serialize;

use crate::store::postgres::budgets::SharedBudget;

/// Where an escrow's budget in a rotation check came from (the admin and debug views).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum BudgetSource {
    /// This replica runs the escrow: its escrow board.
    Live,
    /// A store one process owns (SQLite), the escrow's actor not on the board: the settlement
    /// tick's budget (250 ms).
    Tick,
    /// Published by `replica` (lease `epoch`), `age_ms` old by the database's clock.
    Published {
        replica: String,
        epoch: u64,
        age_ms: i64,
    },
    /// Published by `replica`, but longer ago than the staleness limit.
    Stale { replica: String, age_ms: i64 },
    /// Never published, but served: estimated from the registration and the durable log.
    Unpublished,
    /// Never published nor served: the registered deposit less the creation fee.
    Registered,
}

impl BudgetSource {
    /// The `source` label of `devshard_rotation_budget_sources`.
    pub fn label(&self) -> &'static str {
        match self {
            BudgetSource::Live => "live",
            BudgetSource::Tick => "tick",
            BudgetSource::Published { .. } => "published",
            BudgetSource::Stale { .. } => "stale",
            BudgetSource::Unpublished => "unpublished",
            BudgetSource::Registered => "registered",
        }
    }

    /// Every label (the metric's series).
    pub const LABELS: [&'static str; 6] = [
        "live",
        "tick",
        "published",
        "stale",
        "unpublished",
        "registered",
    ];
}

/// How old a publication may be, and how long this replica has led the rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    pub stale_after_ms: i64,
    pub leading_for_ms: i64,
}

/// An escrow's budget for one rotation check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    pub nonce: u64,
    pub spendable: u64,
    /// `false`: nothing current is known (the rotation neither counts nor retires the escrow).
    pub known: bool,
    pub source: BudgetSource,
}

/// The budget of an escrow another replica runs; `registered` is its deposit less the creation
/// fee, `worst_cost` the reserve of one worst-case request.
pub fn remote_budget(
    shared: &SharedBudget,
    registered: u64,
    worst_cost: u64,
    freshness: Freshness,
) -> Estimate {
    let durable = shared.durable_nonce;
    let unseen_cost = |seen: u64| durable.saturating_sub(seen).saturating_mul(worst_cost);
    let Some(p) = &shared.published else {
        let source = if durable == 0 {
            BudgetSource::Registered
        } else {
            BudgetSource::Unpublished
        };
        return Estimate {
            nonce: durable,
            spendable: registered.saturating_sub(unseen_cost(0)),
            known: true,
            source,
        };
    };
    let nonce = p.report.nonce.max(durable);
    let spendable = p
        .report
        .spendable
        .saturating_sub(unseen_cost(p.report.nonce));
    if p.age_ms <= freshness.stale_after_ms {
        return Estimate {
            nonce,
            spendable,
            known: true,
            source: BudgetSource::Published {
                replica: p.owner.clone(),
                epoch: p.epoch,
                age_ms: p.age_ms,
            },
        };
    }
    Estimate {
        nonce,
        spendable,
        known: freshness.leading_for_ms < freshness.stale_after_ms,
        source: BudgetSource::Stale {
            replica: p.owner.clone(),
            age_ms: p.age_ms,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::budgets::{BudgetReport, Publication};

    const FRESH: Freshness = Freshness {
        stale_after_ms: 6_000,
        leading_for_ms: 60_000,
    };

    fn shared(durable: u64, published: Option<(u64, u64, i64)>) -> SharedBudget {
        SharedBudget {
            escrow_id: "7".into(),
            durable_nonce: durable,
            published: published.map(|(nonce, spendable, age_ms)| Publication {
                owner: "r1".into(),
                epoch: 3,
                report: BudgetReport { nonce, spendable },
                age_ms,
            }),
        }
    }

    #[test]
    fn a_fresh_publication_counts_with_every_unseen_nonce_as_a_worst_case_request() {
        let e = remote_budget(&shared(40, Some((40, 500, 200))), 1_000, 10, FRESH);
        assert_eq!((e.nonce, e.spendable, e.known), (40, 500, true));
        assert_eq!(
            e.source,
            BudgetSource::Published {
                replica: "r1".into(),
                epoch: 3,
                age_ms: 200
            }
        );
        // Three diffs landed after the publication: the nonce is the durable one, and each
        // of them may have cost a worst-case request.
        let e = remote_budget(&shared(43, Some((40, 500, 200))), 1_000, 10, FRESH);
        assert_eq!((e.nonce, e.spendable), (43, 470));
        // A publication ahead of the durable log (its diff in flight) keeps its own nonce.
        let e = remote_budget(&shared(39, Some((40, 500, 200))), 1_000, 10, FRESH);
        assert_eq!((e.nonce, e.spendable), (40, 500));
        // Never below zero.
        let e = remote_budget(&shared(400, Some((40, 500, 200))), 1_000, 10, FRESH);
        assert_eq!(e.spendable, 0);
    }

    #[test]
    fn a_stale_publication_is_unknown_once_the_leader_had_time_to_see_fresh_ones() {
        let stale = shared(43, Some((40, 500, 6_001)));
        let e = remote_budget(&stale, 1_000, 10, FRESH);
        assert!(!e.known, "stale for a leader of 60 s: unknown");
        assert_eq!(e.source.label(), "stale");
        assert_eq!((e.nonce, e.spendable), (43, 470), "still shown");
        // A leader that just took over (or a cluster that just restarted): the owners have not
        // had a TTL to publish yet, so the estimate counts.
        let new_leader = Freshness {
            stale_after_ms: 6_000,
            leading_for_ms: 1_000,
        };
        assert!(remote_budget(&stale, 1_000, 10, new_leader).known);
        // At the limit exactly it is still fresh.
        let edge = remote_budget(&shared(43, Some((40, 500, 6_000))), 1_000, 10, FRESH);
        assert!(edge.known);
        assert_eq!(edge.source.label(), "published");
    }

    #[test]
    fn never_published_is_the_registration_less_what_the_durable_log_may_have_spent() {
        let e = remote_budget(&shared(0, None), 1_000, 10, FRESH);
        assert_eq!((e.nonce, e.spendable, e.known), (0, 1_000, true));
        assert_eq!(e.source, BudgetSource::Registered);
        let e = remote_budget(&shared(12, None), 1_000, 10, FRESH);
        assert_eq!((e.nonce, e.spendable, e.known), (12, 880, true));
        assert_eq!(e.source, BudgetSource::Unpublished);
        assert!(BudgetSource::LABELS.contains(&e.source.label()));
    }
}
