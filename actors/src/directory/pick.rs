//! Escrow choice and admission (docs/lifecycle.md §4, admission by balance). An escrow of the
//! model is a candidate only if it is not deactivated, not draining or later, its actor runs,
//! it is more than `N + 1` nonces (plus one per request already on its way there) below its
//! serving limit, it has a routable host, and its balance less what requests in flight reserved
//! covers this request's reserve, `(input_bytes + ADMISSION_MARGIN_BYTES + max_tokens) ·
//! token_price + fee_per_nonce`, and, during PoC in relaxed mode, one of its hosts is among the
//! participants the chain keeps preserved. Among candidates the one with the most spare capacity wins
//! (races in flight relative to its participants' chain weight); ties rotate. The winner's
//! reserve is held ([`Reservation`]) until the escrow starts the request or the request ends.
//! With no candidate, the error names every escrow's typed refusal ([`PickRefusal`]).
//!
//! The pick runs at the HTTP edge, on the request's own worker thread, over the directory's
//! published [`EscrowBoard`] (no actor message); the counts that change per request (nonce,
//! balance, reservations, races in flight) are shared cells, not copies.

use std::sync::atomic::Ordering;

use actix::prelude::*;

use super::{
    BoardEscrow, CloseEscrow, Directory, DirectoryError, EscrowBoard, PickEscrow, PickedEscrow,
};
use crate::{escrow::BudgetView, policy::reason::PickRefusal};

/// Bytes added to a request's body in its reserve: the body a host receives may be re-encoded
/// (stream options, a retry's rewrite) and the reserve must still cover it.
pub const ADMISSION_MARGIN_BYTES: u64 = 256;

/// The reserve the directory holds for a request: `(input_bytes + margin + max_tokens) ·
/// token_price`, plus the nonce's fee.
pub fn reserved_cost(input_bytes: u64, max_tokens: u64, token_price: u64, fee: u64) -> u64 {
    input_bytes
        .saturating_add(ADMISSION_MARGIN_BYTES)
        .saturating_add(max_tokens)
        .saturating_mul(token_price)
        .saturating_add(fee)
}

/// What the pick knows of one escrow besides its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub deactivated: bool,
    pub closed: bool,
    pub failed: bool,
    pub alive: bool,
    /// Group size `N`.
    pub group: u64,
    /// `max_nonce − (N + 1)`.
    pub serving_limit: u64,
    /// False when the request may go only to preserved participants (relaxed PoC) and none of
    /// the escrow's hosts is one.
    pub preserved_host: bool,
}

/// Whether an escrow may take a request costing `cost` (pure; the first refusal that applies).
pub fn admit(s: Standing, b: &BudgetView, cost: u64) -> Result<(), PickRefusal> {
    if s.deactivated {
        return Err(PickRefusal::Deactivated);
    }
    if s.closed || !b.active {
        return Err(PickRefusal::Draining);
    }
    if s.failed {
        return Err(PickRefusal::Failed);
    }
    if !s.alive {
        return Err(PickRefusal::Unavailable);
    }
    let on_the_way = u64::try_from(b.reservations.len()).unwrap_or(u64::MAX);
    let margin = s
        .group
        .saturating_add(1)
        .saturating_add(on_the_way)
        .saturating_add(b.settling);
    if b.nonce.saturating_add(margin) >= s.serving_limit {
        return Err(PickRefusal::NonceLimit);
    }
    if !s.preserved_host {
        return Err(PickRefusal::NoPreservedHost);
    }
    if !b.routable {
        return Err(PickRefusal::NoRoutableHost);
    }
    if b.spendable() < cost {
        return Err(PickRefusal::OutOfBalance);
    }
    Ok(())
}

impl BoardEscrow {
    /// Whether the escrow takes new requests at all: [`admit`] for the smallest cost (alive,
    /// active, not deactivated, below its nonce limit, a routable host, something spendable).
    /// The replicas' forwarding asks this before a request's cost is known, so a request the
    /// local escrows would refuse goes to another replica's instead.
    pub fn takes_requests(&self, deactivated: &std::collections::BTreeSet<String>) -> bool {
        let s = Standing {
            deactivated: deactivated.contains(&self.id),
            closed: self.closed,
            failed: self.failed,
            alive: self.addr.as_ref().is_some_and(|a| a.connected()),
            group: u64::try_from(self.info.group_size()).unwrap_or(u64::MAX),
            serving_limit: self.info.last_active_nonce(),
            preserved_host: true,
        };
        self.budget.check(|b| admit(s, b, 1).is_ok())
    }
}

fn standing(e: &BoardEscrow, ask: &PickEscrow<'_>) -> Standing {
    Standing {
        deactivated: ask.deactivated.contains(&e.id) || ask.closed.contains(&e.id),
        closed: e.closed,
        failed: e.failed,
        alive: e.addr.as_ref().is_some_and(|a| a.connected()),
        group: u64::try_from(e.info.group_size()).unwrap_or(u64::MAX),
        serving_limit: e.info.last_active_nonce(),
        preserved_host: ask
            .only_hosts
            .is_none_or(|only| e.info.hosts.iter().any(|h| only.contains(&h.address))),
    }
}

impl EscrowBoard {
    /// Picks, among the escrows of `ask.model` that can take the request (see the module docs),
    /// the one with the most spare capacity (ties rotate), and holds the request's reserve
    /// there. Runs on the caller's thread: admission is checked again under the escrow's budget
    /// lock as the reserve is taken, so picks running at once never overcommit a nonce margin
    /// or a balance; an escrow that stopped qualifying in between yields to the next one.
    pub fn pick(&self, ask: &PickEscrow<'_>) -> Result<PickedEscrow, DirectoryError> {
        let board = self.load();
        let mut candidates: Vec<(&BoardEscrow, u64, f64)> = Vec::new();
        let mut refusals: Vec<(String, PickRefusal)> = Vec::new();
        for e in board.escrows.iter().filter(|e| e.info.model == ask.model) {
            let cfg = &e.info.config;
            let cost = reserved_cost(
                ask.input_bytes,
                ask.max_tokens,
                cfg.token_price,
                cfg.fee_per_nonce,
            );
            let s = standing(e, ask);
            match e.budget.check(|b| admit(s, b, cost)) {
                Ok(()) => candidates.push((e, cost, e.load())),
                Err(r) => refusals.push((e.id.clone(), r)),
            }
        }
        if candidates.is_empty() && refusals.is_empty() {
            return Err(DirectoryError::UnknownModel(ask.model.to_string()));
        }
        candidates.sort_by(|a, b| a.2.total_cmp(&b.2));
        let tied = candidates
            .iter()
            .take_while(|c| {
                candidates
                    .first()
                    .is_some_and(|f| (c.2 - f.2).abs() < 1e-12)
            })
            .count();
        if tied > 1 {
            let turn = self
                .rotation
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_add(1);
            candidates[..tied].rotate_left(turn % tied);
        }
        for (e, cost, _) in candidates {
            let s = standing(e, ask);
            let held = e
                .budget
                .try_reserve(ask.request_id, cost, |b| admit(s, b, cost));
            match (held, e.addr.as_ref()) {
                (Ok(reservation), Some(addr)) => {
                    return Ok(PickedEscrow {
                        escrow_id: e.id.clone(),
                        addr: addr.clone(),
                        reservation,
                    })
                }
                (Ok(_), None) => refusals.push((e.id.clone(), PickRefusal::Unavailable)),
                (Err(r), _) => refusals.push((e.id.clone(), r)),
            }
        }
        Err(DirectoryError::NoneQualifies {
            model: ask.model.to_string(),
            refusals,
        })
    }
}

impl Handler<CloseEscrow> for Directory {
    type Result = ();

    fn handle(&mut self, msg: CloseEscrow, _: &mut Self::Context) {
        if let Some(e) = self.escrows.get_mut(&msg.escrow_id) {
            e.closed = true;
            self.publish_board();
        }
    }
}

/// The client's explanation of a pick that found no escrow: one phrase when every escrow was
/// refused for the same reason, else each escrow with its reason.
pub fn explain(model: &str, refusals: &[(String, PickRefusal)]) -> String {
    let first = refusals.first().map(|(_, r)| *r);
    match first {
        Some(r) if refusals.iter().all(|(_, x)| *x == r) => {
            format!("all escrows for model {model} are {}", r.phrase())
        }
        _ => {
            let each: Vec<String> = refusals
                .iter()
                .map(|(id, r)| format!("escrow {id} {}", r.phrase()))
                .collect();
            format!(
                "no escrow for model {model} can take this request: {}",
                each.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn ok_standing() -> Standing {
        Standing {
            deactivated: false,
            closed: false,
            failed: false,
            alive: true,
            group: 3,
            serving_limit: 100,
            preserved_host: true,
        }
    }

    fn budget(balance: u64, nonce: u64) -> BudgetView {
        BudgetView {
            balance,
            nonce,
            active: true,
            routable: true,
            settling: 0,
            reservations: BTreeMap::new(),
        }
    }

    #[test]
    fn the_reserve_counts_body_margin_and_max_tokens_at_the_token_price() {
        assert_eq!(
            reserved_cost(100, 50, 2, 7),
            (100 + ADMISSION_MARGIN_BYTES + 50) * 2 + 7
        );
        assert_eq!(reserved_cost(u64::MAX, 1, 2, 0), u64::MAX);
    }

    #[test]
    fn each_rule_refuses_with_its_reason() {
        let b = budget(1_000, 10);
        assert_eq!(admit(ok_standing(), &b, 1_000), Ok(()));
        let cases = [
            (
                Standing {
                    deactivated: true,
                    ..ok_standing()
                },
                PickRefusal::Deactivated,
            ),
            (
                Standing {
                    closed: true,
                    ..ok_standing()
                },
                PickRefusal::Draining,
            ),
            (
                Standing {
                    failed: true,
                    ..ok_standing()
                },
                PickRefusal::Failed,
            ),
            (
                Standing {
                    alive: false,
                    ..ok_standing()
                },
                PickRefusal::Unavailable,
            ),
            (
                Standing {
                    preserved_host: false,
                    ..ok_standing()
                },
                PickRefusal::NoPreservedHost,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(admit(s, &b, 1), Err(want));
        }
        assert_eq!(
            admit(
                ok_standing(),
                &BudgetView {
                    active: false,
                    ..b.clone()
                },
                1
            ),
            Err(PickRefusal::Draining)
        );
        assert_eq!(
            admit(
                ok_standing(),
                &BudgetView {
                    routable: false,
                    ..b.clone()
                },
                1
            ),
            Err(PickRefusal::NoRoutableHost)
        );
        assert_eq!(
            admit(ok_standing(), &b, 1_001),
            Err(PickRefusal::OutOfBalance)
        );
    }

    #[test]
    fn never_within_n_plus_one_nonces_of_the_serving_limit() {
        // N = 3, limit 100: nonce 95 leaves 5 > N + 1 = 4; nonce 96 leaves 4.
        assert_eq!(admit(ok_standing(), &budget(1_000, 95), 1), Ok(()));
        assert_eq!(
            admit(ok_standing(), &budget(1_000, 96), 1),
            Err(PickRefusal::NonceLimit)
        );
        // A request already on its way takes one more nonce.
        let mut b = budget(1_000, 95);
        b.reservations.insert("r".into(), 1);
        assert_eq!(admit(ok_standing(), &b, 1), Err(PickRefusal::NonceLimit));
    }

    #[test]
    fn reservations_of_requests_in_flight_are_not_spendable() {
        let mut b = budget(300, 0);
        for (i, want) in [(0, true), (1, true), (2, true), (3, false)] {
            let ok = admit(ok_standing(), &b, 100).is_ok();
            assert_eq!(ok, want, "request {i}");
            b.reservations.insert(format!("r{i}"), 100);
        }
    }

    #[test]
    fn the_explanation_names_the_reason() {
        let one = [
            ("1".to_string(), PickRefusal::OutOfBalance),
            ("2".to_string(), PickRefusal::OutOfBalance),
        ];
        assert_eq!(
            explain("m", &one),
            "all escrows for model m are out of balance"
        );
        let mixed = [
            ("1".to_string(), PickRefusal::OutOfBalance),
            ("2".to_string(), PickRefusal::Draining),
        ];
        assert_eq!(
            explain("m", &mixed),
            "no escrow for model m can take this request: escrow 1 out of balance, \
             escrow 2 draining or settling"
        );
    }
}
