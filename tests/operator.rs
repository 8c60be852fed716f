//! The operator's view and the rough edges a new user hits (issue 19): OpenAI validation and
//! request/response shaping, the cost ledger, `/v1/status`, the live page's series, one
//! participants read at start — against the real gateway over HTTP and the simulated network.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "operator/ledger.rs"]
mod ledger;
#[path = "gateway/live.rs"]
mod live;
#[path = "operator/series.rs"]
mod series;
#[path = "operator/shaping.rs"]
mod shaping;
#[path = "operator/startup.rs"]
mod startup;
#[path = "operator/status.rs"]
mod status;
#[path = "operator/validation.rs"]
mod validation;
