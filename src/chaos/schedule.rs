//! The seeded fault schedule: a pure function of (seed, duration, kill interval, host count).
//! The same arguments always give the same steps, so a violation replays with its seed.
//!
//! The run is cut into rounds of [`ROUND_MS`]: a round opens with one fault event (a knob on one
//! host, the same knob on several, a fork, an empty restart, clock skew, a slow host, a chain API
//! fault), sometimes a second one overlapping it, and closes with [`Event::Clear`], after which the
//! runner checks the invariants. `kill -9` steps fall every `kill_every` at a random moment inside
//! a round, i.e. while faults are active.

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

/// Length of one round (fault events, then the clear step and the checks).
pub const ROUND_MS: u64 = 6_000;
/// When, inside a round, the faults are cleared.
const CLEAR_AT_MS: u64 = 4_000;

/// One event applied through the simulator's control API (or to the gateway process).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// `PUT /sim/hosts/{i}/faults` with `faults` on every host of `hosts`. `shared` marks a
    /// failure the correlation guard must recognise (same status or unreachable on ≥ 2 hosts).
    HostFaults {
        hosts: Vec<usize>,
        faults: Value,
        shared: bool,
    },
    /// `fork_from_nonce` = the host's nonce + `ahead`.
    Fork { host: usize, ahead: u64 },
    /// `forget_session`: the hosts restart with empty storage.
    RestartEmpty { hosts: Vec<usize> },
    /// `clock_skew_s` on the hosts.
    ClockSkew { hosts: Vec<usize>, seconds: i64 },
    /// `PUT /sim/hosts/{i}/latency`: a slow host.
    Slow { host: usize, latency: Value },
    /// `PUT /sim/chain/faults`: 429 / 503 / an outage (500) of the chain API.
    ChainFault { faults: Value },
    /// SIGKILL the gateway, then restart it on the same data directory.
    Kill9,
    /// Clear every host fault, latency and chain fault, restart forked hosts empty; then check.
    Clear,
}

/// One scheduled step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// Index in the schedule (what violations refer to).
    pub index: usize,
    /// Offset from the start of the run.
    pub at_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// Turns a textual seed into the RNG seed (numbers are used as is, text is hashed).
pub fn seed_number(seed: &str) -> u64 {
    seed.trim().parse::<u64>().unwrap_or_else(|_| {
        let h = devshard_actors::protocol::crypto::sha256(seed.as_bytes());
        u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
    })
}

/// Some of `0..n`: one host, or 2..=n of them.
fn pick_hosts(rng: &mut StdRng, n: usize, several: bool) -> Vec<usize> {
    let count = if several && n >= 2 {
        rng.gen_range(2..=n)
    } else {
        1
    };
    let mut all: Vec<usize> = (0..n).collect();
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(all.swap_remove(rng.gen_range(0..all.len())));
    }
    out.sort_unstable();
    out
}

/// A knob set that fails requests the same way on every host it is on (the correlation guard's
/// case): an HTTP status, refused connections, or the host going down for a while.
fn shared_knob(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..8) {
        0 => json!({"http_status": 403}),
        1 => json!({"http_status": 404}),
        2 => json!({"http_status": 401}),
        3 => json!({"http_status": 503, "retry_after_s": 1}),
        4 => json!({"http_status": 429}),
        5 => json!({"http_status": 500}),
        6 => json!({"refuse_connections": true}),
        _ => json!({"down_for_ms": rng.gen_range(500..3_000)}),
    }
}

/// Any other host knob (stalls, broken streams, missing or late finish markers, lies).
fn host_knob(rng: &mut StdRng) -> Value {
    let mut knob = match rng.gen_range(0..15) {
        0 => json!({"drop_after_receipt": true}),
        1 => json!({"stall_before_receipt_ms": rng.gen_range(200..4_000)}),
        2 => json!({"first_token_delay_ms": rng.gen_range(200..3_000)}),
        3 => {
            json!({"stall_after_chunks": rng.gen_range(0..4), "stall_ms": rng.gen_range(500..6_000)})
        }
        4 => json!({"stall_after_chunks": rng.gen_range(0..4)}),
        5 => json!({"empty_stream": true}),
        6 => json!({"error_event": true}),
        7 => json!({"truncate_before_done": true}),
        8 => json!({"omit_meta": true}),
        9 => json!({"garble_meta": true}),
        10 => json!({"late_finish_ms": ([-1, 500, 2_000][rng.gen_range(0..3)])}),
        11 => json!({"late_finish_ms": 1_000, "finish_via_peers": true}),
        12 => json!({"withhold_state_sig": true}),
        13 => json!({"wrong_state_hash": true}),
        _ => json!({"signatures_empty": true}),
    };
    if rng.gen_bool(0.3) {
        knob["times"] = json!(rng.gen_range(1..4));
    }
    knob
}

fn fault_event(rng: &mut StdRng, hosts: usize) -> Event {
    match rng.gen_range(0..20) {
        0..=4 => Event::HostFaults {
            hosts: pick_hosts(rng, hosts, true),
            faults: shared_knob(rng),
            shared: true,
        },
        5..=6 => Event::HostFaults {
            hosts: pick_hosts(rng, hosts, false),
            faults: shared_knob(rng),
            shared: false,
        },
        7..=12 => {
            let several = rng.gen_bool(0.4);
            Event::HostFaults {
                hosts: pick_hosts(rng, hosts, several),
                faults: host_knob(rng),
                shared: false,
            }
        }
        13 => Event::Fork {
            host: rng.gen_range(0..hosts),
            ahead: rng.gen_range(1..4),
        },
        14 => {
            let several = rng.gen_bool(0.3);
            Event::RestartEmpty {
                hosts: pick_hosts(rng, hosts, several),
            }
        }
        15 => Event::ClockSkew {
            hosts: {
                let several = rng.gen_bool(0.5);
                pick_hosts(rng, hosts, several)
            },
            seconds: [-40, -10, 10, 40][rng.gen_range(0..4)],
        },
        16..=17 => Event::Slow {
            host: rng.gen_range(0..hosts),
            latency: json!({
                "rtt_ms": rng.gen_range(50..400), "receipt_ms": rng.gen_range(100..1_500),
                "ttft_ms": rng.gen_range(200..2_000), "ttft_us_per_input_byte": 20.0,
                "tokens_per_s": ([5.0, 20.0, 80.0][rng.gen_range(0..3)]), "jitter": 0.2,
            }),
        },
        _ => Event::ChainFault {
            faults: match rng.gen_range(0..4) {
                0 => json!({"http_status": 429}),
                1 => json!({"http_status": 429, "retry_after_s": rng.gen_range(1..10)}),
                2 => json!({"http_status": 503}),
                _ => json!({"http_status": 500, "body": "outage"}),
            },
        },
    }
}

/// The schedule of a run: rounds of faults and clears, plus `kill -9` every `kill_every_ms`.
pub fn generate(
    seed: u64,
    duration_ms: u64,
    kill_every_ms: Option<u64>,
    hosts: usize,
) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let hosts = hosts.max(1);
    let mut events: Vec<(u64, Event)> = Vec::new();
    let mut round_start = 0;
    while round_start + ROUND_MS <= duration_ms {
        events.push((
            round_start + rng.gen_range(0..500),
            fault_event(&mut rng, hosts),
        ));
        if rng.gen_bool(0.35) {
            let at = round_start + rng.gen_range(500..CLEAR_AT_MS - 500);
            events.push((at, fault_event(&mut rng, hosts)));
        }
        events.push((round_start + CLEAR_AT_MS, Event::Clear));
        round_start += ROUND_MS;
    }
    if let Some(every) = kill_every_ms.filter(|e| *e >= ROUND_MS) {
        let mut at = every;
        while at < duration_ms {
            let jitter = rng.gen_range(0..every / 4);
            events.push((at - jitter, Event::Kill9));
            at += every;
        }
    }
    events.sort_by_key(|(at, _)| *at);
    events
        .into_iter()
        .enumerate()
        .map(|(index, (at_ms, event))| Step {
            index,
            at_ms,
            event,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let a = generate(7, 120_000, Some(20_000), 5);
        assert_eq!(a, generate(7, 120_000, Some(20_000), 5));
        assert_ne!(a, generate(8, 120_000, Some(20_000), 5));
        assert_eq!(seed_number("42"), 42);
        assert_eq!(seed_number("abc"), seed_number("abc"));
    }

    #[test]
    fn rounds_end_with_a_clear_and_kills_are_spread() {
        let s = generate(1, 120_000, Some(20_000), 5);
        let clears = s.iter().filter(|x| x.event == Event::Clear).count();
        assert_eq!(clears, 20, "one clear per 6 s round");
        let kills = s.iter().filter(|x| x.event == Event::Kill9).count();
        assert_eq!(kills, 5, "every 20 s over 120 s, none at the end");
        assert!(s.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(s.iter().enumerate().all(|(i, x)| x.index == i));
    }

    #[test]
    fn a_long_schedule_covers_every_kind_of_event() {
        let s = generate(3, 3_600_000, Some(30_000), 5);
        let text = serde_json::to_string(&s).unwrap_or_default();
        for knob in [
            "http_status",
            "refuse_connections",
            "down_for_ms",
            "drop_after_receipt",
            "stall_before_receipt_ms",
            "first_token_delay_ms",
            "stall_after_chunks",
            "stall_ms",
            "empty_stream",
            "error_event",
            "truncate_before_done",
            "omit_meta",
            "garble_meta",
            "late_finish_ms",
            "finish_via_peers",
            "withhold_state_sig",
            "wrong_state_hash",
            "signatures_empty",
            "times",
            "\"fork\"",
            "restart_empty",
            "clock_skew",
            "slow",
            "chain_fault",
            "kill9",
            "retry_after_s",
        ] {
            assert!(text.contains(knob), "{knob} never scheduled");
        }
        let shared_several = s.iter().any(|x| {
            matches!(&x.event, Event::HostFaults { hosts, shared: true, .. } if hosts.len() >= 2)
        });
        assert!(shared_several);
    }
}
