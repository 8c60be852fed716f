//! Messages of the `ParticipantActor`.

use std::sync::Arc;

use actix::Message;
use serde::Serialize;

use super::record::ParticipantRecord;
use crate::{
    policy::{
        health::{HealthState, Preference},
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
