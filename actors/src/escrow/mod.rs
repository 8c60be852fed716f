//! The escrow: its protocol session (plain data) and the actor that drives it.

mod actor;
pub mod attempt;
pub mod config;
pub mod error;
pub mod info;
pub mod messages;
pub mod nonces;
pub mod pending;
mod picker;
pub mod session;
mod settle;
mod sync;
mod timeouts;

pub use actor::EscrowActor;
pub use config::EscrowConfig;
pub use error::EscrowError;
pub use info::{EscrowInfo, HostEndpoint};
pub use session::Session;
