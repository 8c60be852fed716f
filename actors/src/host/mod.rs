//! Talking to devshard hosts: the awc client, request signing at send time and the typed errors
//! of host answers.

pub mod client;
pub mod error;
pub mod signer;

pub use error::{HostError, Rejection};
pub use signer::RequestSigner;
