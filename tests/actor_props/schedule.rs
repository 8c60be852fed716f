//! The seeded fault schedules of `tests/actor_props.rs` (a pure function of the seed), and which
//! hosts invariant 3's second half may judge after a shared fault.

use devshard_gateway::sim::Faults;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Hosts of the simulated network.
pub const HOSTS: usize = 4;

/// A fault that fails requests the same way on every host it is on.
fn shared_fault(rng: &mut StdRng) -> Faults {
    let status = [401, 403, 404, 429, 503][rng.gen_range(0..5)];
    match rng.gen_range(0..6) {
        0 => Faults {
            refuse_connections: true,
            ..Faults::default()
        },
        _ => Faults {
            http_status: Some(status),
            ..Faults::default()
        },
    }
}

fn host_fault(rng: &mut StdRng) -> Faults {
    let mut f = Faults::default();
    match rng.gen_range(0..13) {
        0 => f.drop_after_receipt = true,
        1 => f.stall_before_receipt_ms = Some(rng.gen_range(100..8_000)),
        2 => f.first_token_delay_ms = Some(rng.gen_range(100..3_000)),
        3 => {
            f.stall_after_chunks = Some(rng.gen_range(0..3));
            f.stall_ms = Some(rng.gen_range(100..20_000));
        }
        4 => f.empty_stream = true,
        5 => f.error_event = Some(serde_json::json!(true)),
        6 => f.truncate_before_done = true,
        7 => f.omit_meta = true,
        8 => f.garble_meta = true,
        9 => f.late_finish_ms = Some([-1, 500, 3_000][rng.gen_range(0..3)]),
        10 => f.withhold_state_sig = true,
        11 => f.wrong_state_hash = true,
        _ => f.clock_skew_s = Some([-45, 45][rng.gen_range(0..2)]),
    }
    if rng.gen_bool(0.3) {
        f.times = Some(rng.gen_range(1..3));
    }
    f
}

fn some_hosts(rng: &mut StdRng, several: bool) -> Vec<usize> {
    let n = if several { rng.gen_range(2..=HOSTS) } else { 1 };
    let mut all: Vec<usize> = (0..HOSTS).collect();
    (0..n)
        .map(|_| all.swap_remove(rng.gen_range(0..all.len())))
        .collect()
}

/// One schedule: which faults on which hosts.
#[derive(Debug)]
pub struct Schedule {
    pub faults: Vec<(Vec<usize>, Faults)>,
    /// Hosts that only suffered a shared fault (invariant 3's second half).
    pub shared_only: Vec<usize>,
}

pub fn schedule(seed: u64) -> Schedule {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut faults = Vec::new();
    let mut shared_only = Vec::new();
    if rng.gen_bool(0.3) {
        let hosts = some_hosts(&mut rng, true);
        shared_only.clone_from(&hosts);
        faults.push((hosts, shared_fault(&mut rng)));
    }
    if faults.is_empty() || rng.gen_bool(0.3) {
        let several = rng.gen_bool(0.3);
        let hosts = some_hosts(&mut rng, several);
        let fault = host_fault(&mut rng);
        shared_only.retain(|h| !hosts.contains(h));
        faults.push((hosts, fault));
    }
    Schedule {
        faults,
        shared_only,
    }
}

/// How a host of a schedule's shared fault stood before the fault was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// Healthy and not under repair in the escrow.
    Healthy,
    /// Routable but doubtful (suspect or on probation): it gets attempts, so the gateway can see
    /// it fail, but it is not judged.
    Doubtful,
    /// Ejected, or diverged (under repair or given up) in the escrow: it gets no attempt, so its
    /// share of the fault is invisible to the gateway.
    Unroutable,
}

/// The hosts invariant 3 may require not to be ejected or on probation after a fault every
/// faulted host shared: the healthy ones, and only when at least two faulted hosts were routable
/// and, for a fault that can strike, no host outside every fault of the schedule answered while
/// it lasted (the chaos runner's rule, `devshard_gateway::chaos::spared`).
/// - A fault only one routable host shows, while hosts outside the fault answer, is by every
///   observable that host's own (docs/health.md §1), whatever the unroutable hosts suffered
///   (schedule 4163: hosts 3, 1 and 0 refused connections, but 3 was ejected and 0 under repair,
///   so the gateway saw host 1 refuse while host 2 answered, and ejected host 1).
/// - A fault that can strike (refused connections, 401, 404) on several routable hosts while a
///   host outside it answers makes each faulted host's failures its own by relative evidence;
///   ejecting them is the documented behaviour (schedule 7259: hosts 1 and 2 refused
///   connections, both healthy, and host 1 was ejected; which host answered in between depends
///   on the timing of the two concurrent requests).
pub fn judged_after_shared(before: &[(usize, Before)], shared: Shared) -> Vec<usize> {
    let routable = before
        .iter()
        .filter(|(_, b)| *b != Before::Unroutable)
        .count();
    if routable < 2 || (shared.can_strike && shared.peer_answered) {
        return Vec::new();
    }
    before
        .iter()
        .filter(|(_, b)| *b == Before::Healthy)
        .map(|(i, _)| *i)
        .collect()
}

/// What invariant 3 knows of a schedule's shared fault besides its hosts' standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Its knob can carry a strike (every knob but 403, 429 and 503).
    pub can_strike: bool,
    /// A host outside every fault of the schedule succeeded while the faults were set.
    pub peer_answered: bool,
}

/// The hosts outside every fault of `s`.
pub fn peers(s: &Schedule) -> Vec<usize> {
    (0..HOSTS)
        .filter(|i| s.faults.iter().all(|(hosts, _)| !hosts.contains(i)))
        .collect()
}

/// Whether the shared fault of `s` (its first fault set, when it has shared-only hosts) can
/// strike.
pub fn shared_can_strike(s: &Schedule) -> bool {
    s.faults.first().is_some_and(|(_, f)| {
        serde_json::to_value(f).is_ok_and(|v| devshard_gateway::chaos::spared::knob_can_strike(&v))
    })
}
