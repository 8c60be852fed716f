//! Several `devshard-gateway serve` processes on one PostgreSQL database and one simulated
//! network: requests forwarded to the replica that owns the escrow (one hop, streaming
//! included), escrow admin calls reaching their owner, and host health and settings shared
//! through `LISTEN/NOTIFY` (README "Any replica serves any request").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "forwarding/chat.rs"]
mod chat;
#[path = "process/child.rs"]
mod child;
#[path = "forwarding/health.rs"]
mod health;
#[path = "store/pgdb.rs"]
mod pgdb;
#[path = "forwarding/support.rs"]
mod support;
