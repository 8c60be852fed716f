//! The gateway's last log lines, kept in memory when a test binary asks for them
//! ([`keep_recent_log`]): the property tests print them with a failing schedule, which a
//! timing-dependent failure (schedule 7259 of CI's run of `64efed2`) otherwise leaves untraced.

use std::{
    collections::VecDeque,
    fmt::Write as _,
    sync::{Mutex, OnceLock},
};

/// Lines kept (the newest).
const RECENT_LINES: usize = 600;

static RECENT: OnceLock<Mutex<VecDeque<String>>> = OnceLock::new();

/// From now on, loggers made by `harness::logger` keep the gateway's last info lines.
pub fn keep_recent_log() {
    RECENT.get_or_init(|| Mutex::new(VecDeque::new()));
}

/// Appends a line of the test's own (a marker between schedules).
pub fn mark_recent_log(line: String) {
    if let Some(ring) = RECENT.get() {
        push(ring, line);
    }
}

/// The kept lines, oldest first.
pub fn recent_log() -> Vec<String> {
    RECENT
        .get()
        .map(|r| {
            r.lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn push(ring: &Mutex<VecDeque<String>>, line: String) {
    let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
    if ring.len() >= RECENT_LINES {
        ring.pop_front();
    }
    ring.push_back(line);
}

/// A drain into the ring, when [`keep_recent_log`] was called.
pub fn recent_drain() -> Option<RecentDrain> {
    RECENT.get().map(|_| RecentDrain)
}

pub struct RecentDrain;

struct Line(String);

impl slog::Serializer for Line {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl slog::Drain for RecentDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(
        &self,
        record: &slog::Record<'_>,
        values: &slog::OwnedKVList,
    ) -> Result<(), slog::Never> {
        let Some(ring) = RECENT.get() else {
            return Ok(());
        };
        if !record.level().is_at_least(slog::Level::Info) {
            return Ok(());
        }
        let mut line = Line(format!(
            "{} {}",
            record.level().as_short_str(),
            record.msg()
        ));
        let _ = slog::KV::serialize(&record.kv(), record, &mut line);
        let _ = slog::KV::serialize(values, record, &mut line);
        push(ring, line.0);
        Ok(())
    }
}
