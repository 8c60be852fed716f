//! Structured logs: one JSON object per line on stdout (`ts`, `level`, `msg`, then key/values;
//! every protocol step carries a `stage` key). Built once in the binary and handed down as a
//! `slog::Logger`; there is no global logger. Records go through `slog_async`, whose guard
//! ([`LogGuard`]) must live until the process exits: dropping it flushes the queue, which
//! `std::process::exit` would skip.
//!
//! Every record reaches stdout in **one write** ([`WholeLines`]), and the demo's banner lines go
//! out one write each ([`write_line`]), so a log line can never split a banner line (or another
//! log line) when both streams share a terminal or a file.

use std::io::Write;

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

/// A writer that holds bytes until a newline and hands complete lines to `out` in one
/// `write_all` (one `write(2)` for a line up to the pipe's atomic size), so that what another
/// writer of the same terminal or file prints can only land between lines.
#[derive(Debug)]
pub struct WholeLines<W: Write> {
    buf: Vec<u8>,
    out: W,
}

impl<W: Write> WholeLines<W> {
    pub fn new(out: W) -> WholeLines<W> {
        WholeLines {
            buf: Vec::with_capacity(1024),
            out,
        }
    }
}

impl<W: Write> Write for WholeLines<W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if let Some(end) = self.buf.iter().rposition(|&b| b == b'\n') {
            let rest = self.buf.split_off(end + 1);
            let line = std::mem::replace(&mut self.buf, rest);
            self.out.write_all(&line)?;
            self.out.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.out.write_all(&line)?;
        }
        self.out.flush()
    }
}

/// Writes `line` and a newline to `out` in one write (the banner of `demo`).
pub fn write_line(out: &mut impl Write, line: &str) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    out.write_all(&bytes)?;
    out.flush()
}

/// The process logger: JSON on stdout, records below `level` dropped.
pub fn init(level: slog::Level) -> (Logger, LogGuard) {
    let json = slog_json::Json::new(WholeLines::new(std::io::stdout()))
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
