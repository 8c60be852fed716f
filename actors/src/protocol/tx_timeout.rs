//! The `timeout_timestamp` of an unordered Cosmos tx, unique within this process.
//!
//! An unordered tx has no sequence: the chain tells two of them apart by their bytes (and, since
//! Cosmos SDK 0.53, by the signer and this timestamp). Two txs that carry the same message and
//! were signed in the same second would be byte for byte one tx if the timeout had whole seconds:
//! the second escrow creation of a second was refused as a duplicate, and its intent then read
//! the first creation's escrow as its own, so the rotation believed it had a replacement it never
//! got. [`TxTimeout::unique`] hands out nanosecond timestamps that only ever grow, so every tx
//! this process signs is a new tx; a re-sent tx keeps its persisted bytes.

use std::sync::atomic::{AtomicI64, Ordering};

const NANOS_PER_S: i64 = 1_000_000_000;

/// The last timeout [`TxTimeout::unique`] handed out, in nanoseconds since the epoch.
static LAST_NS: AtomicI64 = AtomicI64::new(0);

/// When an unordered tx stops being valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct TxTimeout {
    pub seconds: i64,
    pub nanos: i32,
}

impl TxTimeout {
    /// `timeout_s` after `now_unix_s`, on a whole second (known-answer tests).
    pub fn after_s(now_unix_s: i64, timeout_s: u64) -> TxTimeout {
        let timeout = i64::try_from(timeout_s).unwrap_or(i64::MAX);
        TxTimeout {
            seconds: now_unix_s.saturating_add(timeout),
            nanos: 0,
        }
    }

    /// `timeout_s` after `now_ms`, and later than every timeout handed out before in this
    /// process (a restart takes longer than the nanosecond this adds at most per tx).
    pub fn unique(now_ms: i64, timeout_s: u64) -> TxTimeout {
        let timeout_ns = i64::try_from(timeout_s)
            .unwrap_or(i64::MAX)
            .saturating_mul(NANOS_PER_S);
        let want = now_ms.saturating_mul(1_000_000).saturating_add(timeout_ns);
        let next = |last: i64| want.max(last.saturating_add(1));
        let last = match LAST_NS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| Some(next(l)))
        {
            Ok(l) | Err(l) => l,
        };
        TxTimeout::from_ns(next(last))
    }

    fn from_ns(ns: i64) -> TxTimeout {
        TxTimeout {
            seconds: ns.div_euclid(NANOS_PER_S),
            nanos: i32::try_from(ns.rem_euclid(NANOS_PER_S)).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_handed_out_in_one_millisecond_all_differ_and_grow() {
        let now_ms = 1_700_000_000_123;
        let a = TxTimeout::unique(now_ms, 540);
        let b = TxTimeout::unique(now_ms, 540);
        let c = TxTimeout::unique(now_ms - 5_000, 540);
        assert!(a < b && b < c, "{a:?} {b:?} {c:?}");
        assert!(a.seconds >= 1_700_000_540, "{a:?}");
        assert_eq!(a.seconds, b.seconds);
    }

    #[test]
    fn a_whole_second_timeout_is_the_known_answer_one() {
        assert_eq!(
            TxTimeout::after_s(1_000, 540),
            TxTimeout {
                seconds: 1_540,
                nanos: 0
            }
        );
    }
}
