//! The simulated devshard network: N hosts, the chain's public API and a control API, all
//! in process on loopback, so the gateway, its tests, the demo and the benchmarks run against
//! real HTTP and real protocol facts (docs/protocol.md §8.5).
//!
//! # Layout
//! - `config.rs`    — [`SimConfig`], [`EpochSchedule`].
//! - `network.rs`   — [`SimNetwork`]: start, inspect and steer a network.
//! - `host/`        — one simulated host: router, sessions (own state machine each), the
//!   `chat/completions` receipt path and SSE stream, `verify-timeout`, the GETs.
//! - `openai.rs`    — the plain OpenAI endpoint every host also serves.
//! - `chain.rs`, `epoch.rs` — the chain public API and REST queries; `traffic.rs` — its
//!   request log, fixed-answer faults and an nginx-style rate limiter.
//! - `ledger.rs`, `txs.rs`, `cosmos_api.rs` — accounts, escrow deposits, `CheckTx` /
//!   `DeliverTx` of settlement txs and the Cosmos REST endpoints, with tx fault knobs.
//! - `control.rs`   — the `/sim/…` control API.
//! - `faults.rs`    — fault knobs and counters; `profile.rs` — latency profiles.
//! - `warm.rs`      — warm keys: which hosts sign with one, the chain's grants, the grants
//!   query and its faults.
//! - `generator.rs` — the deterministic fake model; `server.rs` — hyper plumbing.
//! - `cli.rs`       — the `sim` subcommand.
//!
//! # Use from a test
//!
//! ```no_run
//! # async fn demo() -> Result<(), devshard_gateway::sim::SimError> {
//! use devshard_actors::clock::TokioClock;
//! use devshard_gateway::sim::{Faults, Profile, SimConfig, SimNetwork};
//!
//! let mut cfg = SimConfig::with_seed("my-test");
//! cfg.hosts = 4;
//! cfg.profile = Profile::Zero;
//! let net = SimNetwork::start(cfg, TokioClock::new().shared()).await?;
//! // The gateway signs with `net.gateway_key()`, polls `net.chain_url()` and finds the hosts
//! // through the chain (or `net.hosts()[i].url`). Host 1 omits its next meta event:
//! net.set_faults(1, Faults { omit_meta: true, times: Some(1), ..Faults::default() })?;
//! # Ok(()) }
//! ```
//!
//! # Time
//! Every server task runs on the current tokio runtime and every delay is a `tokio::time`
//! sleep; every timestamp comes from the injected `SharedClock`. A test that pauses tokio's
//! clock therefore runs the simulator in virtual time.

mod chain;
pub mod cli;
mod config;
mod control;
mod cosmos_api;
mod create;
mod epoch;
mod faults;
mod generator;
mod host;
mod ledger;
mod network;
mod openai;
mod profile;
mod server;
mod traffic;
mod txs;
mod warm;
mod warm_api;

pub use self::{
    chain::{EscrowInfo, ParticipantInfo},
    config::{
        ConfirmationPocSchedule, EpochSchedule, SimConfig, DEFAULT_MODEL, DEFAULT_ROUTE_PREFIX,
        DEFAULT_SEED, GATEWAY_KEY_INDEX,
    },
    epoch::{
        EpochView, PHASE_INFERENCE, PHASE_POC_GENERATE, PHASE_POC_GENERATE_WIND_DOWN,
        PHASE_POC_VALIDATE, PHASE_POC_VALIDATE_WIND_DOWN,
    },
    faults::{parse_fault_script, Counters, Faults},
    host::session::HostView,
    ledger::{Account, EscrowStatus, TxFaults, TxResult, DENOM, SIM_CHAIN_ID},
    network::{SimError, SimHostInfo, SimNetwork},
    profile::{LatencyProfile, Profile},
    traffic::{ChainFaults, ChainRequest, ChainRequests, RECENT_REQUESTS},
    txs::TxError,
    warm::{default_type_url, ungranted_key, warm_key, Grant, GrantsFault, WarmMode},
};
