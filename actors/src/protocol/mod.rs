//! The devshard host protocol (docs/protocol.md): wire schema, signatures, the deterministic state
//! machine and the SSE framing of host responses. Shared by the gateway and the simulator, so both
//! sides compute the same roots from the same diffs.

pub mod auth;
pub mod canonical;
pub mod cosmos;
pub mod crypto;
pub mod diff;
pub mod guard;
pub mod proto;
pub mod recovered;
pub mod session_error;
pub mod sse;
pub mod state;
pub mod tx_timeout;
pub mod version;
pub mod warm;
pub mod wire;
