//! Prometheus metrics of chain polling, registered once into a registry handed in from outside.
//! Labels are bounded: `endpoint` ∈ {`epochs_latest`, `participants`, `versions`}; `host` is the
//! public API's authority (a process has a handful) or `miner` for every miner host together;
//! `status` is an HTTP status code or one of `transport`, `timeout`, `decode_error`.

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Host label of every miner host (their number is unbounded).
pub const MINER_HOST_LABEL: &str = "miner";

/// Cheap-to-clone handles.
#[derive(Debug, Clone)]
pub struct ChainMetrics {
    /// `chain_poll_requests_total{endpoint,status}`: every poll request sent, by its result.
    pub requests: IntCounterVec,
    /// `chain_snapshot_age_seconds{endpoint}`: age of the last good snapshot (the oldest miner's
    /// for `versions`); `+Inf` before the first success.
    pub snapshot_age: GaugeVec,
    /// `chain_snapshot_stale{endpoint}`: 1 while older than its bound (any miner for `versions`).
    pub snapshot_stale: IntGaugeVec,
    /// `chain_snapshot_stale_total{endpoint}`: transitions to stale (each one changes routing).
    pub stale_transitions: IntCounterVec,
    /// `chain_poll_backoff_seconds{host}`: remaining 429/503 back-off (largest over miners).
    pub backoff: GaugeVec,
    /// `chain_poll_deferred_total{endpoint,reason}`: polls held back by the budget or a back-off.
    pub deferred: IntCounterVec,
    /// `chain_phase_changes_total{phase}`: phase changes seen, by the new phase kind.
    pub phase_changes: IntCounterVec,
}

impl ChainMetrics {
    /// Registers every metric; call once per registry.
    pub fn register(registry: &Registry) -> Result<ChainMetrics, prometheus::Error> {
        let m = ChainMetrics {
            requests: IntCounterVec::new(
                Opts::new(
                    "chain_poll_requests_total",
                    "Chain poll requests by endpoint and result",
                ),
                &["endpoint", "status"],
            )?,
            snapshot_age: GaugeVec::new(
                Opts::new(
                    "chain_snapshot_age_seconds",
                    "Age of the last good chain snapshot",
                ),
                &["endpoint"],
            )?,
            snapshot_stale: IntGaugeVec::new(
                Opts::new(
                    "chain_snapshot_stale",
                    "1 while a chain snapshot is older than its staleness bound",
                ),
                &["endpoint"],
            )?,
            stale_transitions: IntCounterVec::new(
                Opts::new(
                    "chain_snapshot_stale_total",
                    "Chain snapshots that became older than their staleness bound",
                ),
                &["endpoint"],
            )?,
            backoff: GaugeVec::new(
                Opts::new(
                    "chain_poll_backoff_seconds",
                    "Remaining 429/503 back-off per polled host",
                ),
                &["host"],
            )?,
            deferred: IntCounterVec::new(
                Opts::new(
                    "chain_poll_deferred_total",
                    "Chain polls held back by the request budget or a back-off",
                ),
                &["endpoint", "reason"],
            )?,
            phase_changes: IntCounterVec::new(
                Opts::new("chain_phase_changes_total", "Chain phase changes seen"),
                &["phase"],
            )?,
        };
        registry.register(Box::new(m.requests.clone()))?;
        registry.register(Box::new(m.snapshot_age.clone()))?;
        registry.register(Box::new(m.snapshot_stale.clone()))?;
        registry.register(Box::new(m.stale_transitions.clone()))?;
        registry.register(Box::new(m.backoff.clone()))?;
        registry.register(Box::new(m.deferred.clone()))?;
        registry.register(Box::new(m.phase_changes.clone()))?;
        Ok(m)
    }

    /// Handles registered into a private registry (tests that do not read metrics).
    pub fn detached() -> Result<ChainMetrics, prometheus::Error> {
        ChainMetrics::register(&Registry::new())
    }
}
