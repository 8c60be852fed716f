//! Messages of the `ParticipantActor`.

use std::sync::Arc;

use actix::Message;
use serde::Serialize;

use super::record::ParticipantRecord;
use crate::{
    policy::{
        health::{HealthEffect, HealthState, Preference},
        perf::PerfEstimates,
        settings::HealthSettings,
    },
    protocol::crypto::Address,
};

/// Full state of a participant (debug and admin views).
#[derive(Debug, Message)]
#[rtype(result = "Arc<ParticipantView>")]
pub struct GetParticipant;

/// What `GetParticipant` returns.
#[derive(Debug, Clone, Serialize)]
pub struct ParticipantView {
    pub address: Address,
    pub record: ParticipantRecord,
    pub handled: u64,
    /// `healthy`, `suspect`, `ejected` or `probation`.
    pub state: &'static str,
    pub strikes: f64,
    pub routable: bool,
    pub unresponsive: bool,
    pub next_tick_ms: Option<i64>,
}

/// Admin: end an ejection and start probation. Persisted before the answer.
#[derive(Debug, Message)]
#[rtype(result = "Result<Arc<ParticipantView>, String>")]
pub struct Unquarantine;

/// Admin: clear everything (strikes, level, probation, perf) and delete the persisted record.
#[derive(Debug, Message)]
#[rtype(result = "Result<Arc<ParticipantView>, String>")]
pub struct Forget;

/// Drill and test hook: eject now for `base_ejection_ms` (as an operator marking a host bad).
#[derive(Debug, Message)]
#[rtype(result = "Result<Arc<ParticipantView>, String>")]
pub struct ForceEject;

/// Another replica changed this participant's health (PostgreSQL, shared health): reload the
/// record from the store and tell the escrows.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ReloadRecord;

/// A health decision this replica's actor took by itself (not an admin call), once persisted:
/// what the other replicas are told (PostgreSQL, shared health).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthDecided {
    pub address: Address,
    pub decision: HealthDecision,
}

/// The decisions shared with the other replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthDecision {
    Ejected,
    ProbationStarted,
}

impl HealthDecision {
    /// The decision among a commit's effects, if any (an ejection wins).
    pub fn of(effects: &[HealthEffect]) -> Option<HealthDecision> {
        if effects
            .iter()
            .any(|e| matches!(e, HealthEffect::Ejected { .. }))
        {
            return Some(HealthDecision::Ejected);
        }
        effects
            .iter()
            .any(|e| matches!(e, HealthEffect::ProbationStarted))
            .then_some(HealthDecision::ProbationStarted)
    }
}

/// Where an actor's own health decisions go (`None`: nobody listens, e.g. SQLite).
pub type DecisionSink = Option<tokio::sync::mpsc::UnboundedSender<HealthDecided>>;

/// New health settings (applied live).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct ApplyHealthSettings(pub Arc<HealthSettings>);

/// What escrows learn about a participant whenever its health or perf changes.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct HealthChanged {
    pub address: Address,
    pub health: HealthState,
    pub perf: PerfEstimates,
    pub routable: bool,
    pub preference: Preference,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ejections_and_probations_are_shared_an_ejection_first() {
        let ejected = HealthEffect::Ejected {
            until_ms: 1,
            level: 0,
        };
        assert_eq!(HealthDecision::of(&[]), None);
        assert_eq!(
            HealthDecision::of(&[HealthEffect::BecameSuspect, HealthEffect::BecameHealthy]),
            None
        );
        assert_eq!(
            HealthDecision::of(&[HealthEffect::ProbationStarted]),
            Some(HealthDecision::ProbationStarted)
        );
        assert_eq!(
            HealthDecision::of(&[HealthEffect::ProbationStarted, ejected]),
            Some(HealthDecision::Ejected)
        );
    }
}
