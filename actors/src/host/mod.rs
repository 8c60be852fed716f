//! Talking to devshard hosts: the awc client and the typed errors of host answers.

pub mod client;
pub mod error;

pub use error::{HostError, Rejection};
