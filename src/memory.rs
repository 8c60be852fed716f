//! The process's memory, read at scrape time (issue 16): where the RSS goes, so an operator can
//! tell live data from pages an allocator keeps.
//!
//! | metric | type |
//! |---|---|
//! | `devshard_memory_bytes{kind}` | gauge: `rss` (the kernel's resident set), and jemalloc's `allocated` (live heap), `active` (pages holding it), `resident` (pages jemalloc has mapped and touched, its metadata included), `retained` (address space kept for reuse, not resident), `metadata` |
//!
//! `rss - resident` is memory outside Rust's heap: the binary's text, thread stacks and SQLite's
//! own allocations (its page caches use the C allocator). `resident - active` is what jemalloc
//! keeps: freed pages not yet purged and partly used ones. The kinds are read only in the gateway
//! binary, whose global allocator is jemalloc (`src/main.rs`); elsewhere they read 0.

use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
    IntGaugeVec, Opts, Registry,
};
use tikv_jemalloc_ctl::{epoch, stats};

/// What `devshard_memory_bytes` reports, its `kind` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    Rss,
    Allocated,
    Active,
    Resident,
    Retained,
    Metadata,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 6] = [
        MemoryKind::Rss,
        MemoryKind::Allocated,
        MemoryKind::Active,
        MemoryKind::Resident,
        MemoryKind::Retained,
        MemoryKind::Metadata,
    ];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            MemoryKind::Rss => "rss",
            MemoryKind::Allocated => "allocated",
            MemoryKind::Active => "active",
            MemoryKind::Resident => "resident",
            MemoryKind::Retained => "retained",
            MemoryKind::Metadata => "metadata",
        }
    }

    /// The current reading in bytes (`None` when it cannot be read).
    pub fn read(self) -> Option<u64> {
        let jemalloc = |r: tikv_jemalloc_ctl::Result<usize>| r.ok().map(|v| v as u64);
        match self {
            MemoryKind::Rss => rss_bytes(),
            MemoryKind::Allocated => jemalloc(stats::allocated::read()),
            MemoryKind::Active => jemalloc(stats::active::read()),
            MemoryKind::Resident => jemalloc(stats::resident::read()),
            MemoryKind::Retained => jemalloc(stats::retained::read()),
            MemoryKind::Metadata => jemalloc(stats::metadata::read()),
        }
    }
}

/// Resident set size (`VmRSS` of `/proc/self/status`; Linux, `None` elsewhere).
fn rss_bytes() -> Option<u64> {
    status_kib(std::process::id(), "VmRSS:").map(|kib| kib * 1024)
}

/// A `kB` field of `/proc/{pid}/status`, e.g. `VmRSS:` or `VmHWM:` (Linux; `None` elsewhere).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The collector; [`MemoryMetrics::register`] adds it to a registry once.
pub struct MemoryMetrics {
    bytes: IntGaugeVec,
}

impl MemoryMetrics {
    /// Registers `devshard_memory_bytes` in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<()> {
        let bytes = IntGaugeVec::new(
            Opts::new(
                "memory_bytes",
                "Process memory: rss, and jemalloc's allocated, active, resident, retained and metadata bytes",
            ),
            &["kind"],
        )?;
        registry.register(Box::new(MemoryMetrics { bytes }))
    }
}

impl Collector for MemoryMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.bytes.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // jemalloc's statistics are a snapshot taken when the epoch advances.
        let _ = epoch::advance();
        for kind in MemoryKind::ALL {
            if let Some(v) = kind.read() {
                self.bytes
                    .with_label_values(&[kind.label()])
                    .set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
        self.bytes.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_exported_under_the_namespace_with_the_process_rss() {
        let registry = crate::metrics::new_registry().unwrap();
        MemoryMetrics::register(&registry).unwrap();
        let text = crate::metrics::render(&registry).unwrap();
        for kind in MemoryKind::ALL {
            let line = format!("devshard_memory_bytes{{kind=\"{}\"}} ", kind.label());
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
        let rss = text
            .lines()
            .find_map(|l| l.strip_prefix("devshard_memory_bytes{kind=\"rss\"} "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap();
        // A test process holds at least a few MiB and far less than the machine.
        assert!((1 << 20..1 << 36).contains(&rss), "rss {rss}");
    }
}
