//! A model's runway (docs/lifecycle.md §4): the nonces its serving escrows have left, against
//! what the model uses in `margin_s` at its recent rate. An escrow is low at most half its
//! nonces before its limit (a fresh one is never low at once), so an escrow that lasts less than
//! `2 · margin_s` leaves its replacement less than `margin_s` to land, e.g. through a chain
//! outage. Then the model keeps up to `max_spares` escrows beyond `target_count` serving, and a
//! low escrow retires only while the others cover the margin without it (pure; seed 12's
//! `no_escrow_available` in the README's chaos findings).

use super::{
    plan::{EscrowFacts, Role},
    settings::ModelRotation,
};

/// One serving (active or low) escrow's part of the runway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub escrow_id: String,
    pub role: Role,
    /// Nonces left before its serving limit; none when its balance is low (it may stop at any
    /// request).
    pub left: u64,
}

/// The runway of one model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runway {
    pub serving: Vec<Serving>,
    /// Σ of the serving escrows' `left`.
    pub left: u64,
    /// Nonces the model uses a second: Σ of the serving escrows' burn rates (`super::burn`).
    pub per_s: u64,
    /// What the model uses in `margin_s`.
    pub need: u64,
    /// What a creation on its way adds: the largest serving limit among the model's escrows.
    pub fresh: u64,
}

impl Runway {
    /// The runway of the escrows of one model, each with its role under `rule`.
    pub fn of(escrows: &[EscrowFacts], roles: &[Role], rule: &ModelRotation) -> Runway {
        let mut r = Runway::default();
        let mut burn = 0u64;
        for (e, role) in escrows.iter().zip(roles) {
            r.fresh = r.fresh.max(e.serving_limit);
            if !matches!(role, Role::Active | Role::Low) {
                continue;
            }
            let balance_low = e.spendable < e.worst_cost.saturating_mul(rule.reserve_requests);
            let left = if balance_low {
                0
            } else {
                e.serving_limit.saturating_sub(e.nonce)
            };
            r.left = r.left.saturating_add(left);
            burn = burn.saturating_add(e.burn_per_s);
            r.serving.push(Serving {
                escrow_id: e.escrow_id.clone(),
                role: *role,
                left,
            });
        }
        r.per_s = burn;
        r.need = burn.saturating_mul(rule.margin_s);
        r
    }

    /// True when the serving escrows and `pending` creations (a fresh escrow each) last less
    /// than `margin_s` at the model's rate.
    pub fn short(&self, pending: u32) -> bool {
        let coming = self.fresh.saturating_mul(u64::from(pending));
        self.left.saturating_add(coming) < self.need
    }

    /// Seconds the serving escrows last at the model's rate (`None`: no rate measured).
    pub fn seconds(&self) -> Option<u64> {
        self.left.checked_div(self.per_s)
    }

    /// Whether one more escrow is wanted as a spare: the runway is short and fewer than
    /// `target_count + max_spares` escrows serve or are on their way.
    pub fn wants_spare(&self, rule: &ModelRotation, pending: u32) -> bool {
        let count = self.serving.len() as u64 + u64::from(pending);
        let most = u64::from(rule.target_count) + u64::from(rule.max_spares);
        self.short(pending) && count < most
    }

    /// The low escrows that may retire: those the others cover the margin without, the
    /// emptiest first (each one retired takes its nonces off the runway); every low one when
    /// the model keeps no spares (`max_spares = 0`: the rotation of one replacement each).
    pub fn retirable(&self, rule: &ModelRotation) -> Vec<String> {
        let mut low: Vec<&Serving> = self
            .serving
            .iter()
            .filter(|s| s.role == Role::Low)
            .collect();
        if rule.max_spares == 0 {
            return low.iter().map(|s| s.escrow_id.clone()).collect();
        }
        low.sort_by_key(|s| s.left);
        let mut left = self.left;
        let mut out = Vec::new();
        for s in low {
            let after = left.saturating_sub(s.left);
            if after < self.need {
                break;
            }
            left = after;
            out.push(s.escrow_id.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests;
