//! # devshard-actors
//!
//! The devshard protocol, the pure policies and the actors of the devshard gateway. No actix-web
//! here: the root crate owns the HTTP edge and the process.
//!
//! ## Layout
//! - [`protocol`]: wire schema, signatures, the deterministic state machine, SSE framing.
//! - [`policy`]: pure decision functions (attribution, …), unit-tested without a runtime.
//! - [`escrow`], [`participant`], [`race`], [`directory`]: the actors.
//! - [`chain`]: the chain poller (epoch/phase, participants, versions), its budget and phase gating.
//! - [`host`]: the awc client for devshard hosts and its typed errors.
//! - [`store`], [`clock`]: what actors are given (traits), so tests can use memory and paused time.
//! - [`stats`]: per-actor mailbox depth, message counts and armed timers, read by the debug
//!   endpoint without messaging the actors; actors are addressed through counted
//!   [`stats::TrackedAddr`]s.
//!
//! ## Supervision tree and restart contract
//! ```text
//! System arbiter:  Directory ── EscrowActor(escrow)*  ParticipantActor(address)*
//! HTTP workers:    RaceActor(request)*  (awc lives here; bytes reach the client over bounded mpsc)
//! ```
//! Every entity actor tells the directory when it stops (`Died`, sent from `stopped()`, which runs
//! even when a handler panicked). The directory respawns escrows and participants from their last
//! committed state in the store, within a restart budget; a race is never respawned (its client
//! gets an error; its escrow still settles every nonce the race was given).

pub mod chain;
pub mod clock;
pub mod directory;
pub mod escrow;
pub mod host;
pub mod metrics;
pub mod outcome;
pub mod participant;
pub mod policy;
pub mod protocol;
pub mod race;
pub mod repair;
pub mod settlement;
pub mod stats;
pub mod store;
pub mod tls;
