//! Latency profiles of simulated hosts.
//!
//! A host's timeline for one devshard inference (all sleeps on tokio's clock, so a paused test
//! clock skips them):
//!
//! ```text
//! request arrives ─ rtt/2 (request in flight) ─ apply diffs ─ receipt_ms ─ rtt/2 (response in
//! flight) ─ headers + receipt event ─ ttft_ms + ttft_us_per_input_byte·len ─ role chunk + first
//! token ─ 1/tokens_per_s per further token ─ finish chunk, [DONE], meta
//! (a straggler, with probability straggler_rate, stalls straggler_delay_ms before the first token)
//! ```
//!
//! The response's one-way delay is paid once before the headers; later events are shifted by the
//! same constant, so it is not re-applied per chunk. Every delay is multiplied by
//! `1 + jitter·u` with `u` uniform in `[-1, 1]` from a per-host RNG seeded from the network seed.
//! The plain OpenAI endpoint uses the same timeline without the receipt (that delay models the
//! devshard protocol work: lazy session resolution, diff application, signing).

use std::{fmt, str::FromStr, time::Duration};

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Timing parameters of one host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LatencyProfile {
    /// Network round-trip time between the gateway and this host.
    pub rtt_ms: u64,
    /// Host-side work between the request's arrival and the receipt event.
    pub receipt_ms: u64,
    /// Time from the receipt to the first generated token.
    pub ttft_ms: u64,
    /// Extra time to first token per byte of request body (prefill cost).
    pub ttft_us_per_input_byte: f64,
    /// Decode speed; `0` means unlimited (no delay between tokens).
    pub tokens_per_s: f64,
    /// Relative jitter applied to every delay (`0.1` = ±10 %).
    pub jitter: f64,
    /// Probability that a request stalls `straggler_delay_ms` before its first token (drawn per
    /// request from the host's own seeded stream, so runs are reproducible): The Tail at Scale's
    /// stragglers, which hedging exists for.
    pub straggler_rate: f64,
    /// How long a straggler stalls.
    pub straggler_delay_ms: u64,
}

impl Default for LatencyProfile {
    /// The `default` profile: a reasonably close host with a mid-sized model.
    fn default() -> Self {
        LatencyProfile {
            rtt_ms: 20,
            receipt_ms: 40,
            ttft_ms: 150,
            ttft_us_per_input_byte: 20.0,
            tokens_per_s: 80.0,
            jitter: 0.2,
            straggler_rate: 0.0,
            straggler_delay_ms: 0,
        }
    }
}

impl LatencyProfile {
    /// No added latency at all (benchmarks measure only the software under test).
    pub fn zero() -> Self {
        LatencyProfile {
            rtt_ms: 0,
            receipt_ms: 0,
            ttft_ms: 0,
            ttft_us_per_input_byte: 0.0,
            tokens_per_s: 0.0,
            jitter: 0.0,
            straggler_rate: 0.0,
            straggler_delay_ms: 0,
        }
    }

    /// A fast, co-located host (tests that want realism without long virtual waits).
    pub fn fast() -> Self {
        LatencyProfile {
            rtt_ms: 1,
            receipt_ms: 5,
            ttft_ms: 20,
            ttft_us_per_input_byte: 2.0,
            tokens_per_s: 500.0,
            jitter: 0.1,
            straggler_rate: 0.0,
            straggler_delay_ms: 0,
        }
    }

    /// Time to first token for a request body of `input_len` bytes (before jitter).
    pub fn ttft(&self, input_len: u64) -> Duration {
        let per_byte_us = self.ttft_us_per_input_byte.max(0.0) * input_len as f64;
        Duration::from_millis(self.ttft_ms) + Duration::from_micros(per_byte_us as u64)
    }

    /// Delay between two tokens (before jitter); zero when unlimited.
    pub fn inter_token(&self) -> Duration {
        if self.tokens_per_s > 0.0 {
            Duration::from_secs_f64(1.0 / self.tokens_per_s)
        } else {
            Duration::ZERO
        }
    }

    /// Half the round trip (one direction).
    pub fn half_rtt(&self) -> Duration {
        Duration::from_micros(self.rtt_ms.saturating_mul(500))
    }
}

/// A named set of per-host profiles.
#[derive(Clone, Debug, PartialEq)]
pub enum Profile {
    /// Every host without added latency.
    Zero,
    /// Every host co-located and fast.
    Fast,
    /// Every host at [`LatencyProfile::default`].
    Default,
    /// The testnet topology of seed 001: two co-located hosts (~1 ms RTT, ~10 ms receipt) and
    /// the rest in a remote data centre (310–370 ms RTT, receipts 0.7–1.4 s as the gateway sees them).
    Mixed,
    /// Explicit profiles; host `i` gets entry `i % len` (the default profile when empty).
    Custom(Vec<LatencyProfile>),
}

impl Profile {
    /// The profile of host `index` out of `hosts`.
    pub fn for_host(&self, index: usize, hosts: usize) -> LatencyProfile {
        match self {
            Profile::Zero => LatencyProfile::zero(),
            Profile::Fast => LatencyProfile::fast(),
            Profile::Default => LatencyProfile::default(),
            Profile::Mixed => mixed(index, hosts),
            Profile::Custom(list) if list.is_empty() => LatencyProfile::default(),
            Profile::Custom(list) => list.get(index % list.len()).cloned().unwrap_or_default(),
        }
    }
}

/// Number of co-located hosts in the `mixed` profile.
const MIXED_LOCAL_HOSTS: usize = 2;

fn mixed(index: usize, hosts: usize) -> LatencyProfile {
    if index < MIXED_LOCAL_HOSTS {
        return LatencyProfile {
            rtt_ms: 1,
            receipt_ms: 9,
            ttft_ms: 140,
            ttft_us_per_input_byte: 5.0,
            tokens_per_s: 60.0,
            jitter: 0.1,
            straggler_rate: 0.0,
            straggler_delay_ms: 0,
        };
    }
    // Spread the remote hosts evenly over the observed ranges.
    let remote = hosts.saturating_sub(MIXED_LOCAL_HOSTS).max(1);
    let k = (index - MIXED_LOCAL_HOSTS) as f64;
    let frac = if remote > 1 {
        k / (remote - 1) as f64
    } else {
        0.5
    };
    let rtt_ms = 310 + (60.0 * frac) as u64;
    let observed_receipt_ms = 700 + (700.0 * frac) as u64;
    LatencyProfile {
        rtt_ms,
        receipt_ms: observed_receipt_ms.saturating_sub(rtt_ms),
        ttft_ms: 400,
        ttft_us_per_input_byte: 30.0,
        tokens_per_s: 45.0,
        jitter: 0.15,
        straggler_rate: 0.0,
        straggler_delay_ms: 0,
    }
}

impl FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "zero" => Ok(Profile::Zero),
            "fast" => Ok(Profile::Fast),
            "default" => Ok(Profile::Default),
            "mixed" => Ok(Profile::Mixed),
            other => Err(format!(
                "unknown profile {other:?} (zero, fast, default, mixed)"
            )),
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::Zero => "zero",
            Profile::Fast => "fast",
            Profile::Default => "default",
            Profile::Mixed => "mixed",
            Profile::Custom(_) => "custom",
        })
    }
}

/// Seeded source of jitter for one host.
#[derive(Debug)]
pub(crate) struct Jitter {
    rng: StdRng,
}

impl Jitter {
    pub(crate) fn new(seed: [u8; 32]) -> Self {
        Jitter {
            rng: StdRng::from_seed(seed),
        }
    }

    /// `base · (1 + frac·u)`, `u` uniform in `[-1, 1]`; never negative.
    pub(crate) fn apply(&mut self, base: Duration, frac: f64) -> Duration {
        if base.is_zero() || frac <= 0.0 {
            return base;
        }
        let u: f64 = self.rng.gen_range(-1.0..=1.0);
        base.mul_f64((1.0 + frac.min(1.0) * u).max(0.0))
    }

    /// A uniform draw in `[0, 1)` (validation sampling).
    pub(crate) fn unit(&mut self) -> f64 {
        self.rng.gen::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_reproduces_seed_001_topology() {
        let p: Vec<_> = (0..7).map(|i| Profile::Mixed.for_host(i, 7)).collect();
        assert_eq!(p[0].rtt_ms, 1);
        assert_eq!(p[1].rtt_ms + p[1].receipt_ms, 10);
        assert_eq!(p[2].rtt_ms + p[2].receipt_ms, 700);
        assert_eq!(p[6].rtt_ms + p[6].receipt_ms, 1400);
        assert!(p[2..].iter().all(|h| (310..=370).contains(&h.rtt_ms)));
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let mut j = Jitter::new([1; 32]);
        for _ in 0..100 {
            let d = j.apply(Duration::from_millis(100), 0.2);
            assert!(d >= Duration::from_millis(80) && d <= Duration::from_millis(120));
        }
    }
}
