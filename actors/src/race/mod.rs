//! Races: one actor per client request, one task per attempt.

mod actor;
pub mod api;
pub mod assemble;
mod attempt;
mod crown;
mod errors;
mod handlers;
mod host_answers;
pub mod messages;
mod prewarm;
pub mod sends;

pub use actor::RaceActor;
pub use api::{
    AttemptRecord, DispatchHook, RaceError, RaceErrorKind, RaceLimits, RaceReply, RaceReport,
    RaceSpec, RaceStart, StreamErrorFormat,
};
