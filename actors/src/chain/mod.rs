//! The polite control plane (docs/health.md §7, invariant 10): polling the chain's public API for the
//! epoch and phase, the active participants and each miner's `/v1/versions`, within a per-host
//! request budget that no interval setting can exceed, with 429/503 back-off, last-known-good
//! snapshots with staleness bounds, and phase gating of new requests.
//!
//! # Layout
//! - [`settings`]: [`ChainPollSettings`] (serde, env, validation against the budget), [`PocMode`].
//! - [`budget`]: [`HostGates`], the per-host sliding-window budget and back-off gate shared by
//!   every poller; [`backoff`]: `Retry-After` parsing and exponential back-off (pure).
//! - [`snapshot`]: the parsed API answers; [`view`]: [`ChainView`], what everyone reads.
//! - [`admission`](mod@admission): the pure phase-gating decision for a new request.
//! - [`ChainPoller`] (`poller.rs`, `schedule.rs`, `apply.rs`): the actor; [`messages`] its API.
//! - [`metrics`]: `chain_poll_requests_total`, `chain_snapshot_age_seconds`,
//!   `chain_poll_backoff_seconds`, …
//!
//! # Wiring
//! ```text
//! let gates = HostGates::new(&settings);                  // one per process, shared by pollers
//! let metrics = ChainMetrics::register(&registry)?;       // once per registry
//! let poller = ChainPoller::new(public_api, settings, ChainPollerDeps { clock, log, metrics, gates })?
//!     .start();                                           // inside the actix system (awc)
//! poller.do_send(Subscribe(recipient));  // Arc<ChainView> after every good poll and every change
//! match admission(&cached_view, mode, model, clock.now_ms()) { Serve | Refuse{..} | ServeOnly{..} }
//! poller.send(ApplyPollSettings(new)).await??;            // PUT /v1/admin/settings, live
//! poller.send(GetSnapshot).await?;                        // /v1/debug/actors (serde)
//! ```

pub mod admission;
mod apply;
pub mod backoff;
pub mod budget;
pub mod fetch;
pub mod messages;
pub mod metrics;
mod poller;
mod schedule;
pub mod settings;
pub mod snapshot;
pub mod view;

pub use self::{
    admission::{admission, Admission},
    budget::{HostGateView, HostGates},
    messages::{
        ApplyPollSettings, ChainChange, ChainChanged, GetSnapshot, SetVersionsScope, StopPoller,
        Subscribe,
    },
    metrics::ChainMetrics,
    poller::{ChainPoller, ChainPollerDeps, ChainPollerError, HOUSEKEEPING_INTERVAL, POLLER_ID},
    settings::{ChainPollSettings, PocMode, SettingsError},
    snapshot::PhaseKind,
    view::{ChainView, EndpointStatus},
};
