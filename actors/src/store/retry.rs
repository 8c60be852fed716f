//! Retrying while the database is unavailable: the delay before each attempt, doubling from
//! [`FIRST_RETRY`] to [`MAX_RETRY`] (pure). Used by the PostgreSQL store's reconnects and by the
//! directory's respawns of escrows the outage stopped.

use std::time::Duration;

/// The delay after the first failure.
pub const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest delay between two attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(2);

/// The delay before the next attempt after `failures` consecutive failed ones (≥ 1):
/// `FIRST_RETRY · 2^(failures−1)`, at most `MAX_RETRY`.
pub fn retry_delay(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    FIRST_RETRY.saturating_mul(1u32 << shift).min(MAX_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_100_ms_to_2_s() {
        let ms: Vec<u128> = (1..=7).map(|f| retry_delay(f).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(retry_delay(0), FIRST_RETRY);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY);
    }
}
