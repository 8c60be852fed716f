//! devshard protocol, policies and actors.
pub mod clock;
pub mod protocol;
pub mod store;
