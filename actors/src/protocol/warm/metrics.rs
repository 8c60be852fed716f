//! `warm_key_checks_total{result}` and `warm_key_cache_entries` (registry namespace `devshard`).
//! `result` ∈ {`granted`, `not_granted`, `failed`, `cached`}.

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

/// Cheap-to-clone handles.
#[derive(Debug, Clone)]
pub struct WarmKeyMetrics {
    /// Chain checks by result, and answers served from the cache (`cached`).
    pub checks: IntCounterVec,
    /// Entries in the grant cache (positive and negative).
    pub cache_entries: IntGauge,
}

impl WarmKeyMetrics {
    /// Registers both metrics; call once per registry.
    pub fn register(registry: &Registry) -> Result<WarmKeyMetrics, prometheus::Error> {
        let m = WarmKeyMetrics::detached()?;
        registry.register(Box::new(m.checks.clone()))?;
        registry.register(Box::new(m.cache_entries.clone()))?;
        Ok(m)
    }

    /// Handles that count but are exported nowhere (tests, tools).
    pub fn detached() -> Result<WarmKeyMetrics, prometheus::Error> {
        Ok(WarmKeyMetrics {
            checks: IntCounterVec::new(
                Opts::new(
                    "warm_key_checks_total",
                    "Warm-key grant checks by result (cached = answered from the cache)",
                ),
                &["result"],
            )?,
            cache_entries: IntGauge::new(
                "warm_key_cache_entries",
                "Entries in the warm-key grant cache",
            )?,
        })
    }
}
