//! Tests of the HTTP edge and process wiring: configuration, error shapes of
//! `/v1/chat/completions`, admin auth, ops routes, the chain client and in-process start/stop,
//! the settings API, and phase gating against the simulated chain (`poc`). Other end-to-end tests
//! against the simulator live elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "edge/access.rs"]
mod access;
#[path = "edge/admin.rs"]
mod admin;
#[path = "edge/chain.rs"]
mod chain;
#[path = "edge/chat.rs"]
mod chat;
#[path = "edge/config.rs"]
mod config;
#[path = "edge/idempotency.rs"]
mod idempotency;
#[path = "gateway/live.rs"]
mod live;
#[path = "edge/openapi.rs"]
mod openapi;
#[path = "edge/operator.rs"]
mod operator;
#[path = "edge/ops.rs"]
mod ops;
#[path = "edge/overload.rs"]
mod overload;
#[path = "edge/overload_links.rs"]
mod overload_links;
#[path = "edge/persist.rs"]
mod persist;
#[path = "edge/poc.rs"]
mod poc;
#[path = "edge/poc_paused.rs"]
mod poc_paused;
#[path = "edge/poc_routing.rs"]
mod poc_routing;
#[path = "edge/settings.rs"]
mod settings;
#[path = "edge/support.rs"]
mod support;
#[path = "edge/tls.rs"]
mod tls;
#[path = "gateway/tls_proxy.rs"]
mod tls_proxy;
