//! Store metrics, read from the store's counters at scrape time (no thread updates them):
//!
//! | metric | type |
//! |---|---|
//! | `devshard_store_wal_bytes` | gauge: the WAL file after the last checkpoint (bounded, `checkpoint.rs`) |
//! | `devshard_store_wal_truncations_total` | counter: checkpoints that cut a WAL past its limit |
//! | `devshard_store_group_commits_total` | counter: transactions the writer committed |
//! | `devshard_store_ops_committed_total` | counter: writes in those transactions |
//! | `devshard_store_reconnects_total{connection}` | counter: PostgreSQL connections (`writer`, `reader`, `leases`) re-established after a loss |
//! | `devshard_store_connection_up{connection}` | gauge: 1 while that PostgreSQL connection is up, 0 while it reconnects |
//! | `devshard_store_connection_tls{connection}` | gauge: 1 when that PostgreSQL connection's session is encrypted (TLS, `sslmode`) |

use std::sync::Arc;

use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
    IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use super::GatewayStore;

/// The collector; [`StoreMetrics::register`] adds it to a registry once.
pub struct StoreMetrics {
    store: Arc<GatewayStore>,
    wal_bytes: IntGauge,
    truncations: IntCounter,
    groups: IntCounter,
    ops: IntCounter,
    reconnects: IntCounterVec,
    up: IntGaugeVec,
    tls: IntGaugeVec,
}

impl StoreMetrics {
    /// Registers the store's metrics in `registry`.
    pub fn register(registry: &Registry, store: Arc<GatewayStore>) -> prometheus::Result<()> {
        let metrics = StoreMetrics {
            store,
            wal_bytes: IntGauge::with_opts(Opts::new(
                "store_wal_bytes",
                "Size of the store's WAL file after the last checkpoint",
            ))?,
            truncations: IntCounter::with_opts(Opts::new(
                "store_wal_truncations_total",
                "Checkpoints that truncated a WAL past its limit",
            ))?,
            groups: IntCounter::with_opts(Opts::new(
                "store_group_commits_total",
                "Transactions committed by the store writer",
            ))?,
            ops: IntCounter::with_opts(Opts::new(
                "store_ops_committed_total",
                "Writes committed by the store writer",
            ))?,
            reconnects: IntCounterVec::new(
                Opts::new(
                    "store_reconnects_total",
                    "PostgreSQL connections re-established after a loss",
                ),
                &["connection"],
            )?,
            up: IntGaugeVec::new(
                Opts::new(
                    "store_connection_up",
                    "1 while the PostgreSQL connection is up, 0 while it reconnects",
                ),
                &["connection"],
            )?,
            tls: IntGaugeVec::new(
                Opts::new(
                    "store_connection_tls",
                    "1 when the PostgreSQL connection is encrypted (TLS), 0 when it is not",
                ),
                &["connection"],
            )?,
        };
        registry.register(Box::new(metrics))
    }
}

/// Raises `counter` to `total` (the store's counters only grow).
fn catch_up(counter: &IntCounter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

impl Collector for StoreMetrics {
    fn desc(&self) -> Vec<&Desc> {
        [
            &self.wal_bytes.desc(),
            &self.truncations.desc(),
            &self.groups.desc(),
            &self.ops.desc(),
            &self.reconnects.desc(),
            &self.up.desc(),
            &self.tls.desc(),
        ]
        .into_iter()
        .flatten()
        .copied()
        .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let stats = self.store.stats();
        self.wal_bytes
            .set(i64::try_from(stats.wal_bytes).unwrap_or(i64::MAX));
        catch_up(&self.truncations, stats.wal_truncations);
        catch_up(&self.groups, stats.groups_committed);
        catch_up(&self.ops, stats.ops_committed);
        for c in self.store.connections() {
            let label = [c.kind.label()];
            catch_up(&self.reconnects.with_label_values(&label), c.reconnects);
            self.up.with_label_values(&label).set(i64::from(c.up));
            self.tls.with_label_values(&label).set(i64::from(c.tls));
        }
        let mut out = self.wal_bytes.collect();
        out.extend(self.truncations.collect());
        out.extend(self.groups.collect());
        out.extend(self.ops.collect());
        out.extend(self.reconnects.collect());
        out.extend(self.up.collect());
        out.extend(self.tls.collect());
        out
    }
}

#[cfg(test)]
mod tests {
    use devshard_actors::store::Store;

    use super::*;

    #[test]
    fn the_store_metrics_follow_the_writer_and_carry_the_namespace() {
        let dir = std::env::temp_dir().join(format!("store-metrics-{}", std::process::id()));
        let store = Arc::new(GatewayStore::Sqlite(
            crate::store::SqliteStore::open(dir.join("s.db")).unwrap(),
        ));
        let registry = crate::metrics::new_registry().unwrap();
        StoreMetrics::register(&registry, store.clone()).unwrap();
        let text = crate::metrics::render(&registry).unwrap();
        assert!(
            text.contains("devshard_store_group_commits_total 0"),
            "{text}"
        );
        futures::executor::block_on(store.put("ns", "k", serde_json::json!(1))).unwrap();
        futures::executor::block_on(store.flush()).unwrap();
        let text = crate::metrics::render(&registry).unwrap();
        assert!(
            !text.contains("devshard_store_group_commits_total 0"),
            "{text}"
        );
        assert!(
            text.contains("devshard_store_ops_committed_total 1"),
            "{text}"
        );
        assert!(text.contains("devshard_store_wal_bytes"), "{text}");
        assert!(
            text.contains("devshard_store_wal_truncations_total 0"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
