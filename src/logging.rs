//! Structured logs: one JSON object per line on stdout (`ts`, `level`, `msg`, then key/values;
//! every protocol step carries a `stage` key). Built once in the binary and handed down as a
//! `slog::Logger`; there is no global logger. Records go through `slog_async`, whose guard
//! ([`LogGuard`]) must live until the process exits: dropping it flushes the queue, which
//! `std::process::exit` would skip.

use slog::{o, Drain, Logger};

/// Records queued between the callers and the writer thread.
pub const LOG_CHANNEL_SIZE: usize = 4_096;
/// Name of the writer thread.
const LOG_THREAD_NAME: &str = "slog-writer";

/// Keeps the async writer alive; drop it last (it flushes pending records).
pub struct LogGuard {
    _guard: slog_async::AsyncGuard,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogGuard")
    }
}

/// The process logger: JSON on stdout, records below `level` dropped.
pub fn init(level: slog::Level) -> (Logger, LogGuard) {
    let json = slog_json::Json::new(std::io::stdout())
        .add_default_keys()
        .build()
        .fuse();
    let filtered = slog::LevelFilter::new(json, level).fuse();
    let (drain, guard) = slog_async::Async::new(filtered)
        .chan_size(LOG_CHANNEL_SIZE)
        .overflow_strategy(slog_async::OverflowStrategy::DropAndReport)
        .thread_name(LOG_THREAD_NAME.to_string())
        .build_with_guard();
    let log = Logger::root(drain.fuse(), o!("service" => "devshard-gateway"));
    (log, LogGuard { _guard: guard })
}

/// A logger that drops everything (tests that are not about logs).
pub fn discard() -> Logger {
    Logger::root(slog::Discard, o!())
}
