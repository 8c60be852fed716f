//! Messages of the `ParticipantActor`.

use std::sync::Arc;

use actix::Message;
use serde::Serialize;

use super::record::ParticipantRecord;
use crate::protocol::crypto::Address;

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
}
