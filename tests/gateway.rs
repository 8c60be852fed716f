//! End-to-end tests of the gateway's actors against the simulated devshard network (real HTTP on
//! loopback, real signatures, every host with its own state machine).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// Hosts sign with their cold keys unless a test asks otherwise.
pub const WARM_KEYS: devshard_gateway::sim::WarmMode = devshard_gateway::sim::WarmMode::None;

#[path = "gateway/admission.rs"]
mod admission;
#[path = "gateway/adopt.rs"]
mod adopt;
#[path = "gateway/background.rs"]
mod background;
#[path = "gateway/board.rs"]
mod board;
#[path = "gateway/catch_up.rs"]
mod catch_up;
#[path = "gateway/create.rs"]
mod create;
#[path = "gateway/debug_stats.rs"]
mod debug_stats;
#[path = "gateway/durable_acks.rs"]
mod durable_acks;
#[path = "gateway/escrow_delete.rs"]
mod escrow_delete;
#[path = "gateway/fidelity.rs"]
mod fidelity;
#[path = "gateway/flow.rs"]
mod flow;
#[path = "gateway/harness.rs"]
mod harness;
#[path = "gateway/health.rs"]
mod health;
#[path = "gateway/hedging.rs"]
mod hedging;
#[path = "gateway/http_edge.rs"]
mod http_edge;
#[path = "gateway/keep_warm.rs"]
mod keep_warm;
#[path = "gateway/keys.rs"]
mod keys;
#[path = "gateway/late_finish.rs"]
mod late_finish;
#[path = "gateway/lease.rs"]
mod lease;
#[path = "gateway/lifecycle.rs"]
mod lifecycle;
#[path = "gateway/live.rs"]
mod live;
#[path = "gateway/load.rs"]
mod load;
#[path = "gateway/lying_far_host.rs"]
mod lying_far_host;
#[path = "gateway/nonce_limit.rs"]
mod nonce_limit;
#[path = "gateway/optimistic.rs"]
mod optimistic;
#[path = "store/pgdb.rs"]
mod pgdb;
#[path = "gateway/reach.rs"]
mod reach;
#[path = "gateway/reach_rejections.rs"]
mod reach_rejections;
#[path = "gateway/repair.rs"]
mod repair;
#[path = "gateway/replicas.rs"]
mod replicas;
#[path = "gateway/requests.rs"]
mod requests;
#[path = "gateway/reroute.rs"]
mod reroute;
#[path = "gateway/retention.rs"]
mod retention;
#[path = "gateway/rotation.rs"]
mod rotation;
#[path = "gateway/rotation_spares.rs"]
mod rotation_spares;
#[path = "gateway/settle.rs"]
mod settle;
#[path = "gateway/settle_edges.rs"]
mod settle_edges;
#[path = "gateway/settle_faults.rs"]
mod settle_faults;
#[path = "gateway/supervision.rs"]
mod supervision;
#[path = "gateway/timeout_batch.rs"]
mod timeout_batch;
#[path = "gateway/timeout_votes.rs"]
mod timeout_votes;
#[path = "gateway/tls.rs"]
mod tls;
#[path = "gateway/tls_proxy.rs"]
mod tls_proxy;
#[path = "gateway/versions.rs"]
mod versions;
#[path = "gateway/vote_wakes.rs"]
mod vote_wakes;
#[path = "gateway/warm.rs"]
mod warm;
