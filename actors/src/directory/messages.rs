//! Messages of the `Directory`.

use std::collections::BTreeSet;

use actix::Message;
use serde::Serialize;

use super::DirectoryError;
use crate::{
    escrow::{key::KeySource, EscrowActor, EscrowInfo, Reservation},
    participant::ParticipantActor,
    protocol::crypto::Address,
    stats::TrackedAddr,
};

/// Registers (and persists) an escrow and starts its actor. Idempotent for the same info.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), DirectoryError>")]
pub struct AddEscrow {
    pub info: EscrowInfo,
    /// Where the escrow's own signing key is (`None`: the gateway key). Persisted before the
    /// registration record.
    pub key: Option<KeySource>,
}

/// Stops an escrow's actor and forgets it (`purge` also deletes its diff log).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), DirectoryError>")]
pub struct RemoveEscrow {
    pub escrow_id: String,
    pub purge: bool,
}

/// What a new request asks of the pick ([`super::EscrowBoard::pick`], see `pick.rs`): among
/// the escrows of a model that can take it, the one with the most spare capacity (ties rotate),
/// holding the request's reserve there.
#[derive(Debug, Clone, Copy)]
pub struct PickEscrow<'a> {
    pub model: &'a str,
    /// The request (its reservation is keyed by it).
    pub request_id: &'a str,
    /// Body bytes the hosts will get.
    pub input_bytes: u64,
    pub max_tokens: u64,
    /// Escrows an admin deactivated.
    pub deactivated: &'a BTreeSet<String>,
    /// Escrows that already refused this request because they closed.
    pub closed: &'a [String],
    /// Relaxed PoC: only escrows with a host among these participants qualify (`None`: any).
    pub only_hosts: Option<&'a BTreeSet<Address>>,
}

/// The escrow chosen for a request. Dropping it ends the request's reservation (the escrow ends
/// it earlier, when it starts the request).
#[derive(Debug)]
pub struct PickedEscrow {
    pub escrow_id: String,
    pub addr: TrackedAddr<EscrowActor>,
    pub reservation: Reservation,
}

/// One escrow's actor, if live.
#[derive(Debug, Message)]
#[rtype(result = "Option<TrackedAddr<EscrowActor>>")]
pub struct GetEscrow {
    pub escrow_id: String,
}

/// One participant's actor (spawned on demand).
#[derive(Debug, Message)]
#[rtype(result = "Result<TrackedAddr<ParticipantActor>, DirectoryError>")]
pub struct GetParticipantActor {
    pub address: Address,
}

/// Kinds of entity actors the directory supervises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    Escrow,
    Participant,
    Race,
}

/// Sent from an entity actor's `stopped()`: it stopped (restart, retirement or panic).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Died {
    pub kind: ActorKind,
    pub id: String,
    pub cause: StopCause,
}

/// Why an entity actor stopped: decides whether the stop counts against its restart budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopCause {
    /// A failure of its own (panic, refused write, …): charged to the restart budget.
    #[default]
    Failed,
    /// The database was unavailable: not charged; respawned with back-off until it is back.
    StoreUnavailable,
}

/// A race started (debug listing and escrow load).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RaceStarted {
    pub race_id: u64,
    pub escrow_id: String,
    pub request_id: String,
}

/// A race ended.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RaceEnded {
    pub race_id: u64,
    pub escrow_id: String,
}

/// Status of every entity the directory knows, participants included (debug endpoint).
#[derive(Debug, Message)]
#[rtype(result = "DirectoryStatus")]
pub struct GetStatus;

/// Status of every registered escrow only (readiness, the escrow listings): its size follows
/// the escrows, not their participants (10 000 at 1 000 escrows of 10 hosts).
#[derive(Debug, Message)]
#[rtype(result = "Vec<EntityStatus>")]
pub struct GetEscrowStatuses;

/// One supervised entity.
#[derive(Debug, Clone, Serialize)]
pub struct EntityStatus {
    pub kind: ActorKind,
    pub id: String,
    pub alive: bool,
    pub failed: bool,
    pub restarts: u32,
    pub in_flight: usize,
}

/// What `GetStatus` returns.
#[derive(Debug, Clone, Serialize)]
pub struct DirectoryStatus {
    pub entities: Vec<EntityStatus>,
    pub races: Vec<(u64, String, String)>,
}

/// Fault injection: makes one entity actor panic (only when fault injection is enabled).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), DirectoryError>")]
pub struct InjectPanicInto {
    pub kind: ActorKind,
    pub id: String,
}

/// Fault injection: makes one entity actor stop reading its mailbox for `ms`, as if stuck (only
/// when fault injection is enabled).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), DirectoryError>")]
pub struct InjectStallInto {
    pub kind: ActorKind,
    pub id: String,
    pub ms: u64,
}

/// The running escrow and participant actors (the debug listing probes each with a deadline).
/// Participants of every registered escrow are started first, as `ListParticipants` does.
#[derive(Debug, Message)]
#[rtype(result = "LiveActors")]
pub struct GetLiveActors;

/// What `GetLiveActors` returns.
#[derive(Debug, Clone, Default)]
pub struct LiveActors {
    pub escrows: Vec<(String, TrackedAddr<EscrowActor>)>,
    pub participants: Vec<(Address, TrackedAddr<ParticipantActor>)>,
}

/// An escrow started settling: it is no longer picked for new requests.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CloseEscrow {
    pub escrow_id: String,
}
