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

use actix::prelude::*;

use super::{CloseEscrow, Directory, DirectoryError, EscrowSlot, PickEscrow, PickedEscrow};
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
    let margin = s.group.saturating_add(1).saturating_add(on_the_way);
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

fn standing(id: &str, e: &EscrowSlot, msg: &PickEscrow) -> Standing {
    Standing {
        deactivated: msg.exclude.contains(id),
        closed: e.closed,
        failed: e.slot.failed,
        alive: e.slot.addr.as_ref().is_some_and(|a| a.connected()),
        group: u64::try_from(e.info.group_size()).unwrap_or(u64::MAX),
        serving_limit: e.info.last_active_nonce(),
        preserved_host: msg
            .only_hosts
            .as_ref()
            .is_none_or(|only| e.info.hosts.iter().any(|h| only.contains(&h.address))),
    }
}

impl Handler<PickEscrow> for Directory {
    type Result = Result<PickedEscrow, DirectoryError>;

    fn handle(&mut self, msg: PickEscrow, _: &mut Self::Context) -> Self::Result {
        let mut candidates: Vec<(String, f64)> = Vec::new();
        let mut refusals: Vec<(String, PickRefusal)> = Vec::new();
        for (id, e) in &self.escrows {
            if e.info.model != msg.model {
                continue;
            }
            let cfg = &e.info.config;
            let cost = reserved_cost(
                msg.input_bytes,
                msg.max_tokens,
                cfg.token_price,
                cfg.fee_per_nonce,
            );
            if let Err(r) = admit(standing(id, e, &msg), &e.budget.view(), cost) {
                refusals.push((id.clone(), r));
                continue;
            }
            let weight: u64 = e.info.hosts.iter().map(|h| h.weight.max(1)).sum();
            let load = e.in_flight as f64 / weight.max(1) as f64;
            candidates.push((id.clone(), load));
        }
        if candidates.is_empty() && refusals.is_empty() {
            return Err(DirectoryError::UnknownModel(msg.model));
        }
        let best = candidates
            .iter()
            .map(|(_, l)| *l)
            .fold(f64::INFINITY, f64::min);
        let tied: Vec<&String> = candidates
            .iter()
            .filter(|(_, l)| (*l - best).abs() < 1e-12)
            .map(|(id, _)| id)
            .collect();
        if tied.is_empty() {
            return Err(DirectoryError::NoneQualifies {
                model: msg.model,
                refusals,
            });
        }
        self.rotation = self.rotation.wrapping_add(1);
        let id = tied[self.rotation % tied.len()].clone();
        let refused = || DirectoryError::NoneQualifies {
            model: msg.model.clone(),
            refusals: vec![(id.clone(), PickRefusal::Unavailable)],
        };
        let e = self.escrows.get(&id).ok_or_else(refused)?;
        let addr = e.slot.addr.clone().ok_or_else(refused)?;
        let cfg = &e.info.config;
        let cost = reserved_cost(
            msg.input_bytes,
            msg.max_tokens,
            cfg.token_price,
            cfg.fee_per_nonce,
        );
        let reservation = e.budget.reserve(&msg.request_id, cost);
        Ok(PickedEscrow {
            escrow_id: id,
            addr,
            reservation,
        })
    }
}

impl Handler<CloseEscrow> for Directory {
    type Result = ();

    fn handle(&mut self, msg: CloseEscrow, _: &mut Self::Context) {
        if let Some(e) = self.escrows.get_mut(&msg.escrow_id) {
            e.closed = true;
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
