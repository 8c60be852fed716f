//! (in progress)
pub mod faults;
pub mod generator;
pub mod profile;
pub(crate) mod server;
