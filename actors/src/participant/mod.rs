//! Participants: process-wide health of each host address.

mod actor;
mod handlers;
pub mod messages;
pub mod record;

pub use actor::{ParticipantActor, ParticipantDeps};
