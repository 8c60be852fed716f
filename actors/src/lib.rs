//! devshard protocol, policies and actors.
pub mod protocol;
