//! Pure decision functions: plain functions over plain state, unit-tested without a runtime.
//!
//! - [`attribution`]: what happened to an attempt → one outcome class (docs/health.md §1).
//! - [`correlation`]: the correlation guard (shared faults, held strikes, cause messages; §1).
//! - [`health`]: the participant health state machine (§2).
//! - [`perf`]: time-decayed performance estimates and the Unresponsive verdict (§3).
//! - [`hedge`]: hedge budget, hedge triggers and targets, the liveness rule for crowning (§4, §2).
//! - [`backoff`]: the repair loop's back-off with jitter (§6; the chain poller's is `chain::backoff`).
//! - [`reason`]: typed reasons of outcomes and empty diffs (one spelling each, `as_str`).
//! - [`settings`]: every knob above, with defaults and validation.

pub mod attribution;
pub mod backoff;
pub mod correlation;
pub mod health;
pub mod hedge;
pub mod mempool;
pub mod perf;
pub mod reason;
pub mod settings;
