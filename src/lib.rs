//! devshard-gateway: the process around the devshard actors.
pub mod sim;
pub mod store;
