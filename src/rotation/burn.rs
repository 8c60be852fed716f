//! How fast each escrow uses its nonces (`[rotation] margin_s`): measured between the rotation's
//! checks, as the fastest recent rate, decaying with a 30 s half-life. A request takes one nonce
//! per host it tries, and a nonce passed over a host that gets no work (ejected, unreachable,
//! catching up) is one more: the rotating hour-long chaos run (seed `long-1`, 712 s) burnt 5 000
//! nonces in 3 s while one host of five served, so a margin counted in nonces ran out before a
//! replacement could be created through a chain answering 503.

use std::collections::BTreeMap;

use super::plan::EscrowFacts;

/// Half-life of a measured rate (ms).
const HALF_LIFE_MS: f64 = 30_000.0;
/// Shortest interval a rate is measured over (ms).
const MIN_INTERVAL_MS: i64 = 200;

#[derive(Debug, Clone, Copy)]
struct Seen {
    nonce: u64,
    at_ms: i64,
    per_s: f64,
}

/// Each escrow's last seen nonce and its rate (owned by the rotation actor).
#[derive(Debug, Default)]
pub struct BurnRates {
    seen: BTreeMap<String, Seen>,
}

impl BurnRates {
    /// Observes `nonce` of `escrow` at `now_ms`; its rate in nonces per second (rounded up).
    pub fn observe(&mut self, escrow: &str, nonce: u64, now_ms: i64) -> u64 {
        let s = self.seen.entry(escrow.to_owned()).or_insert(Seen {
            nonce,
            at_ms: now_ms,
            per_s: 0.0,
        });
        let dt = now_ms.saturating_sub(s.at_ms);
        if dt >= MIN_INTERVAL_MS {
            let dt_s = dt as f64 / 1_000.0;
            let now_rate = nonce.saturating_sub(s.nonce) as f64 / dt_s;
            let decayed = s.per_s * 0.5f64.powf(dt as f64 / HALF_LIFE_MS);
            *s = Seen {
                nonce,
                at_ms: now_ms,
                per_s: now_rate.max(decayed),
            };
        }
        s.per_s.ceil() as u64
    }

    /// Fills each escrow's `burn_per_s` and forgets the escrows no longer listed.
    pub fn apply<'a>(&mut self, escrows: impl Iterator<Item = &'a mut EscrowFacts>, now_ms: i64) {
        let mut listed = Vec::new();
        for e in escrows {
            e.burn_per_s = self.observe(&e.escrow_id, e.nonce, now_ms);
            listed.push(e.escrow_id.clone());
        }
        self.seen.retain(|id, _| listed.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_follows_a_burst_at_once_and_forgets_it_slowly() {
        let mut r = BurnRates::default();
        assert_eq!(r.observe("1", 100, 0), 0, "first sight: no rate yet");
        assert_eq!(r.observe("1", 200, 1_000), 100);
        assert_eq!(
            r.observe("1", 300, 1_100),
            100,
            "too short an interval: unchanged"
        );
        assert_eq!(
            r.observe("1", 1_900, 2_000),
            1_700,
            "a burst counts at once"
        );
        // Idle for a half-life: half of it is left.
        assert_eq!(r.observe("1", 1_900, 32_000), 850);
        assert_eq!(r.observe("1", 1_900, 92_000), 213);
    }
}
