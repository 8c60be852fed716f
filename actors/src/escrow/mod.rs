//! The escrow: its protocol session (plain data) and the actor that drives it.

mod actor;
pub mod attempt;
pub mod config;
pub mod error;
mod health;
mod hedging;
pub mod info;
pub mod messages;
pub mod nonces;
mod outcomes;
pub mod pending;
mod picker;
mod repair;
pub mod session;
mod settle;
mod sync;
mod timeouts;
mod wire_cache;

pub use actor::{EscrowActor, EscrowDeps, HostHealth};
pub use config::EscrowConfig;
pub use error::EscrowError;
pub use info::{EscrowInfo, HostEndpoint};
pub use session::Session;
