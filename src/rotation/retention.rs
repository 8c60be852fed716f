//! The retention of settled escrows (docs/lifecycle.md §4): `rotation.settled_retention_s`
//! after an escrow settled, the rotation check removes it as `DELETE /v1/admin/escrows/{id}`
//! would (`crate::escrow_removal`, archive row `by: retention`); 0 keeps every settled escrow
//! registered. Pure: which escrows go now, and when each settled one will.
//!
//! **Which escrows.** Every settled escrow of a model the rotation manages (the check visits
//! only those), whether the rotation retired it or an admin settled it: the rotation retires
//! most of them, and one an admin settled is just as finished (settled on chain, it never
//! serves again). No durable record says who started a settlement, and telling them apart would
//! buy nothing: an admin may delete either. Escrows of models the rotation does not manage
//! (and every escrow while rotation is off) are never removed by it: their operator did not ask
//! for rotation, and `DELETE` stays their only way out.
//!
//! **Since when.** The settlement record's `updated_ms` of a `settled` record is when it
//! settled: the settlement actor never writes a settled record again
//! (`devshard_actors::settlement::machine::SettlementRecord::updated_ms`).

use super::plan::EscrowFacts;

/// When `e` is removed: `retention_s` after it settled; `None` when it is not settled or
/// settled escrows are kept (`retention_s` 0).
pub fn removal_at_ms(e: &EscrowFacts, retention_s: u64) -> Option<i64> {
    if retention_s == 0 || !e.settled {
        return None;
    }
    let retention_ms = i64::try_from(retention_s.saturating_mul(1_000)).unwrap_or(i64::MAX);
    e.settled_at_ms.map(|at| at.saturating_add(retention_ms))
}

/// The settled escrows among `escrows` whose retention is over at `now_ms`.
pub fn due(escrows: &[EscrowFacts], retention_s: u64, now_ms: i64) -> Vec<String> {
    escrows
        .iter()
        .filter(|e| removal_at_ms(e, retention_s).is_some_and(|at| at <= now_ms))
        .map(|e| e.escrow_id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::remote::BudgetSource;

    fn escrow(id: &str, settled_at_ms: Option<i64>) -> EscrowFacts {
        EscrowFacts {
            escrow_id: id.into(),
            nonce: 90,
            serving_limit: 95,
            spendable: 0,
            worst_cost: 10,
            closed: settled_at_ms.is_some(),
            settled: settled_at_ms.is_some(),
            settled_at_ms,
            deactivated: false,
            budget_known: true,
            source: BudgetSource::Live,
            burn_per_s: 0,
        }
    }

    #[test]
    fn a_settled_escrow_goes_once_its_retention_is_over_and_not_before() {
        let settled = escrow("1", Some(10_000));
        assert_eq!(removal_at_ms(&settled, 60), Some(70_000));
        let all = [settled, escrow("2", None)];
        assert!(
            due(&all, 60, 69_999).is_empty(),
            "kept during the retention"
        );
        assert_eq!(due(&all, 60, 70_000), ["1"]);
        assert_eq!(
            due(&all, 60, i64::MAX),
            ["1"],
            "an active escrow never goes"
        );
    }

    #[test]
    fn zero_keeps_settled_escrows_and_only_settled_ones_go() {
        let settled = escrow("1", Some(0));
        assert_eq!(removal_at_ms(&settled, 0), None);
        assert!(due(&[settled], 0, i64::MAX).is_empty());
        // Draining or settling (closed, not settled) stays, however old.
        let settling = EscrowFacts {
            settled: false,
            settled_at_ms: None,
            ..escrow("2", Some(0))
        };
        assert!(settling.closed);
        assert!(due(&[settling], 1, i64::MAX).is_empty());
        // Settled without a known time (no record read): kept.
        let unknown = EscrowFacts {
            settled_at_ms: None,
            ..escrow("3", Some(0))
        };
        assert!(due(&[unknown], 1, i64::MAX).is_empty());
        // A huge retention saturates instead of overflowing.
        assert_eq!(
            removal_at_ms(&escrow("4", Some(5)), u64::MAX),
            Some(i64::MAX)
        );
    }
}
