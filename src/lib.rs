//! devshard-gateway: the process around the devshard actors.
//!
//! # Layout
//! - [`config`]: TOML file + `DEVSHARD_*` environment → validated [`config::Config`].
//! - [`logging`]: slog JSON logger (async, with a guard kept until exit).
//! - [`metrics`]: the Prometheus registry and the HTTP metrics.
//! - [`chain`]: chain REST client used when an escrow is registered.
//! - [`escrows`]: escrow registration and admin summaries; [`escrow_archive`]: deleted escrows.
//! - [`http`]: the actix-web edge (OpenAI routes, ops, admin, error mapping).
//! - [`overload`]: the adaptive concurrency limit and its queue at the edge.
//! - [`state`]: `AppState`, what every handler gets (request accounting, chain polling).
//! - [`app`]: process wiring: `build_app`, `start`, `run`, `serve`.
//! - [`store`]: the SQLite store; [`sim`]: the simulated network.
pub mod app;
pub mod bench;
pub mod chain;
pub mod chaos;
pub mod config;
pub mod demo;
pub mod escrow_archive;
pub mod escrow_removal;
pub mod escrows;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod overload;
pub mod recoveries;
pub mod replicas;
pub mod rotation;
pub mod sim;
pub mod state;
pub mod store;
