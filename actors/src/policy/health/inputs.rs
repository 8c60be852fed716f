//! What the health state machine reads about an outcome and its escrows: the charge an outcome
//! carries (HEALTH.md §1 table, §2 immediate ejections) and the escrow-level facts behind the
//! floor and relative evidence (§1, §2), with the pure check [`ejection_allowed`], and the
//! panic-mode order of an escrow with no routable host ([`panic_order`]).

use serde::Serialize;

use super::{decayed_strikes, HealthState, HealthStatus};
use crate::{
    outcome::{AttemptOutcome, OutcomeClass},
    policy::{reason::OutcomeReason, settings::HealthSettings},
};

/// What an outcome asks of the health state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    Nothing,
    /// Probation credit (a finished, verified attempt).
    Credit,
    /// Strike of weight 1.0.
    Strike,
    /// Byzantine signature or stalled winner: strike and eject at once.
    EjectNow,
}

/// The facts of one final outcome that health reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeFacts {
    pub class: OutcomeClass,
    /// Attribution reason (byzantine signatures and stalled winners eject at once).
    pub reason: OutcomeReason,
    /// The attempt was the crowned winner (a stalled winner ejects at once).
    pub winner: bool,
    /// The correlation guard found the fault shared: it never touches health.
    pub shared: bool,
}

impl OutcomeFacts {
    /// Facts of a non-winning, non-shared outcome of `class`.
    pub fn new(class: OutcomeClass, reason: OutcomeReason) -> Self {
        OutcomeFacts {
            class,
            reason,
            winner: false,
            shared: false,
        }
    }

    /// Facts of a final outcome (`winner`: its bytes went to the client).
    pub fn from_outcome(outcome: &AttemptOutcome, winner: bool) -> Self {
        OutcomeFacts {
            winner,
            ..OutcomeFacts::new(outcome.class, outcome.reason)
        }
    }

    /// What these facts ask of health: only Success and unshared HostFault touch it.
    pub fn charge(&self) -> Charge {
        match self.class {
            _ if self.shared => Charge::Nothing,
            OutcomeClass::Success => Charge::Credit,
            OutcomeClass::HostFault
                if self.reason.is_byzantine() || (self.winner && self.reason.is_stall()) =>
            {
                Charge::EjectNow
            }
            OutcomeClass::HostFault => Charge::Strike,
            _ => Charge::Nothing,
        }
    }
}

/// Routability of one escrow the participant serves, as the escrow sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowView {
    /// Distinct participants of the escrow.
    pub distinct: u32,
    /// Of those, routable now (this participant included when it is routable).
    pub routable: u32,
    /// Another participant of this escrow succeeded within `peer_evidence_window_ms`.
    pub peer_success_recent: bool,
}

/// Escrow-level facts an ejection needs (HEALTH.md §1 relative evidence, §2 floor).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EjectionContext {
    /// Every escrow in which the participant holds slots.
    pub escrows: Vec<EscrowView>,
    /// The gateway has seen any success at all (false on a fresh start).
    pub gateway_has_any_success: bool,
}

/// Why an ejection did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuppressReason {
    /// It would leave an escrow below `min_routable_fraction` (or with nobody) without peers succeeding.
    Floor,
    /// No peer of any escrow it serves succeeded recently, though the gateway has successes.
    NoPeerEvidence,
}

/// Whether an ejection may happen now (floor first, then relative evidence).
pub fn ejection_allowed(
    ctx: &EjectionContext,
    settings: &HealthSettings,
    currently_routable: bool,
) -> Result<(), SuppressReason> {
    for e in ctx.escrows.iter().filter(|e| e.distinct > 0) {
        let after = e.routable.saturating_sub(u32::from(currently_routable));
        let fraction = f64::from(after) / f64::from(e.distinct);
        if after == 0 || (fraction < settings.min_routable_fraction && !e.peer_success_recent) {
            return Err(SuppressReason::Floor);
        }
    }
    let evidence = ctx.escrows.iter().any(|e| e.peer_success_recent);
    if evidence || !ctx.gateway_has_any_success {
        Ok(())
    } else {
        Err(SuppressReason::NoPeerEvidence)
    }
}

/// Panic mode (HEALTH.md §2): when an escrow has no routable participant, the least-bad are raced
/// anyway. Indices of `states`, least bad first: fewest decayed strikes, then the earliest end of
/// ejection, then position. The caller races the first few and logs/counts the panic.
pub fn panic_order(states: &[&HealthState], settings: &HealthSettings, now_ms: i64) -> Vec<usize> {
    let mut keyed: Vec<(f64, i64, usize)> = states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let until = match s.state {
                HealthStatus::Ejected { until_ms, .. } => until_ms,
                _ => i64::MIN,
            };
            (decayed_strikes(s, settings, now_ms), until, i)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    keyed.into_iter().map(|(_, _, i)| i).collect()
}
