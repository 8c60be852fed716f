//! Signature recoveries, read at scrape time (issue 16): how many this process computed with
//! secp256k1 and how many its memo answered (`devshard_actors::protocol::recovered`).
//!
//! | metric | type |
//! |---|---|
//! | `devshard_signature_recoveries_total{result}` | counter: `computed` (secp256k1 ran), `memo` (a signature checked before in this process, or signed by it: the escrow's own diffs, which the cost ledger verifies again) |
//!
//! Recovery is the costliest step of a request; `computed` per served request is what the
//! protocol makes the gateway pay (the host's state signature, its receipt and its finish
//! marker), and anything above it is work to look at.

use devshard_actors::protocol::recovered;
use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
    IntCounterVec, Opts, Registry,
};

/// The collector; [`RecoveryMetrics::register`] adds it to a registry once.
pub struct RecoveryMetrics {
    total: IntCounterVec,
}

impl RecoveryMetrics {
    /// Registers `devshard_signature_recoveries_total` in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<()> {
        let total = IntCounterVec::new(
            Opts::new(
                "signature_recoveries_total",
                "Signature recoveries by how they were answered: computed with secp256k1, or from the memo",
            ),
            &["result"],
        )?;
        registry.register(Box::new(RecoveryMetrics { total }))
    }
}

impl Collector for RecoveryMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.total.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let counts = recovered::counts();
        for (result, now) in [("computed", counts.computed), ("memo", counts.memo)] {
            let counter = self.total.with_label_values(&[result]);
            counter.inc_by(now.saturating_sub(counter.get()));
        }
        self.total.collect()
    }
}

#[cfg(test)]
mod tests {
    use devshard_actors::protocol::crypto::{recover_address, SigningKey};

    use super::*;

    fn reading(text: &str, result: &str) -> u64 {
        let prefix = format!("devshard_signature_recoveries_total{{result=\"{result}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} missing from:\n{text}"))
    }

    #[test]
    fn a_computed_recovery_and_a_memo_answer_are_each_counted() {
        let registry = crate::metrics::new_registry().unwrap();
        RecoveryMetrics::register(&registry).unwrap();
        let before = crate::metrics::render(&registry).unwrap();
        let key = SigningKey::derive("recoveries metric", 1);
        let sig = key.sign(b"counted once computed, then from the memo");
        let message = b"counted once computed, then from the memo";
        assert_eq!(recover_address(message, &sig).unwrap(), *key.address());
        assert_eq!(recover_address(message, &sig).unwrap(), *key.address());
        let after = crate::metrics::render(&registry).unwrap();
        // Other tests of this process recover too: the counts only grow, by at least these.
        assert!(reading(&after, "computed") > reading(&before, "computed"));
        assert!(reading(&after, "memo") > reading(&before, "memo"));
    }
}
