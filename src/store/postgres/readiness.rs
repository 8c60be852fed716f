//! Readiness of a replica on the PostgreSQL store (`GET /readyz`, README "Several replicas"):
//!
//! 1. the database answers a `SELECT 1` within [`PING_TIMEOUT`];
//! 2. the directory ran its first ownership round (it claimed its share of the escrows, which
//!    may be none: a replica that owns nothing is ready too, the others own the escrows);
//! 3. its heartbeat and leases were renewed less than one TTL ago (a replica whose renewals
//!    fail loses its leases to the others at the TTL, so it stops being ready then too).
//!
//! The decision is the pure function [`decide`]; [`LeaseClock`] records when the last claim or
//! renewal succeeded.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// How long the readiness ping may take before the database counts as unreachable.
pub const PING_TIMEOUT: Duration = Duration::from_millis(1500);

/// Why a replica on PostgreSQL is not ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The ping failed or timed out.
    #[error("the database is unreachable: {error}")]
    DatabaseUnreachable { error: String },
    /// The directory has not finished its first ownership round since the start.
    #[error("this replica has not planned its escrow ownership yet")]
    OwnershipPending,
    /// The last successful heartbeat and renewal is older than the lease TTL.
    #[error("the escrow leases were last renewed {age_ms} ms ago (TTL {ttl_ms} ms)")]
    LeasesStale { age_ms: u64, ttl_ms: u64 },
}

impl NotReady {
    /// A bounded code for the JSON answer and the metric label.
    pub fn code(&self) -> &'static str {
        match self {
            NotReady::DatabaseUnreachable { .. } => "database_unreachable",
            NotReady::OwnershipPending => "ownership_pending",
            NotReady::LeasesStale { .. } => "leases_stale",
        }
    }
}

/// Every outcome label, `ready` included (for the metric's series).
pub const OUTCOMES: [&str; 4] = [
    "ready",
    "database_unreachable",
    "ownership_pending",
    "leases_stale",
];

/// The readiness decision from the ping's result, whether the first ownership round ran and the
/// age of the last successful heartbeat and renewal (`None`: never).
pub fn decide(
    ping: Result<(), String>,
    ownership_ran: bool,
    since_renewed: Option<Duration>,
    ttl: Duration,
) -> Result<(), NotReady> {
    ping.map_err(|error| NotReady::DatabaseUnreachable { error })?;
    if !ownership_ran {
        return Err(NotReady::OwnershipPending);
    }
    match since_renewed {
        Some(age) if age < ttl => Ok(()),
        age => Err(NotReady::LeasesStale {
            age_ms: age.map_or(u64::MAX, millis),
            ttl_ms: millis(ttl),
        }),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// When the last lease claim or renewal succeeded.
#[derive(Debug)]
pub struct LeaseClock {
    origin: Instant,
    /// Milliseconds after `origin`, plus one (0: never).
    last_ok: AtomicU64,
}

impl Default for LeaseClock {
    fn default() -> Self {
        LeaseClock {
            origin: Instant::now(),
            last_ok: AtomicU64::new(0),
        }
    }
}

impl LeaseClock {
    /// Records a successful claim or renewal now.
    pub fn mark(&self) {
        let at = millis(self.origin.elapsed()).saturating_add(1);
        self.last_ok.fetch_max(at, Ordering::Relaxed);
    }

    /// How long ago the last success was (`None`: never).
    pub fn since_last(&self) -> Option<Duration> {
        match self.last_ok.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.origin
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn ready_only_with_a_reachable_database_and_fresh_leases() {
        let fresh = Some(Duration::from_secs(2));
        assert_eq!(decide(Ok(()), true, fresh, TTL), Ok(()));
        let down = decide(Err("refused".into()), true, fresh, TTL).unwrap_err();
        assert_eq!(down.code(), "database_unreachable");
        assert_eq!(
            decide(Ok(()), false, fresh, TTL),
            Err(NotReady::OwnershipPending)
        );
        let stale = decide(Ok(()), true, Some(Duration::from_secs(11)), TTL).unwrap_err();
        assert_eq!(
            stale,
            NotReady::LeasesStale {
                age_ms: 11_000,
                ttl_ms: 10_000
            }
        );
        assert_eq!(
            decide(Ok(()), true, None, TTL).unwrap_err().code(),
            "leases_stale"
        );
        for e in [down, stale, NotReady::OwnershipPending] {
            assert!(OUTCOMES.contains(&e.code()));
        }
    }

    #[test]
    fn the_lease_clock_starts_at_never() {
        let clock = LeaseClock::default();
        assert_eq!(clock.since_last(), None);
        clock.mark();
        assert!(clock
            .since_last()
            .is_some_and(|d| d < Duration::from_secs(1)));
    }
}
