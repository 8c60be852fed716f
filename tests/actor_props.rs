//! Whole-actor property tests in paused time: the directory, escrow, race and participant actors
//! together against the in-process simulator, over many small seeded fault schedules (issue 12,
//! invariants 1–4). Each schedule puts one or two fault sets on one or several hosts, sends a
//! streaming and a whole request, clears the faults and checks:
//! 1. after a sync every host that is not forked, under repair or ejected holds the escrow's nonce
//!    and root, and no host holds a nonce beyond it;
//! 2. both requests end (virtual deadline) with a complete answer or a typed error, and a stream
//!    ends with `[DONE]` or a last error event, never with bytes after an error;
//! 3. a request succeeds within 2 s (virtual) of the faults clearing, and a host that was
//!    healthy and only suffered a fault every faulted host shared is not ejected or on probation;
//! 4. every few schedules, after the protocol deadlines pass, no inference the escrow granted is
//!    left pending or started on the hosts, and the escrow has no pending finish or timeout.
//!
//! `DEVSHARD_ACTOR_SCHEDULES` (default 250 in `cargo test`; CI runs 10⁴ in `.ci/run`, the README
//! says how to run 10⁵) and `DEVSHARD_ACTOR_SEED` (the first schedule's seed; a failure prints
//! how to replay it alone). A progress line every 50 schedules gives the wall time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The harness's host key mode (cold keys here).
pub const WARM_KEYS: devshard_gateway::sim::WarmMode = devshard_gateway::sim::WarmMode::None;

#[path = "gateway/harness.rs"]
mod harness;
#[path = "actor_props/schedule.rs"]
mod schedule;

use std::time::Duration;

use devshard_actors::{
    escrow::messages::SyncHosts,
    outcome::OutcomeClass,
    policy::health::HealthStatus,
    protocol::state::{InferenceStatus, SessionConfig},
};
use devshard_gateway::{
    chaos::load::{judge_body, judge_stream, Verdict},
    sim::{Faults, Profile, SimConfig},
};

use harness::recent_log;
use harness::{Answer, Harness};
use schedule::{
    judged_after_shared, peers, schedule, shared_can_strike, Before, Schedule, Shared, HOSTS,
};
/// Schedules per network (a fresh simulator and escrow: bounded nonces, isolated histories).
/// Each diff costs more as the state grows (a schedule at nonce 5 000 took ~4× one at 500), so
/// blocks stay short.
const BLOCK: u64 = 100;
/// Invariant 4 is checked every this many schedules (it lets protocol deadlines pass).
const SETTLE_EVERY: u64 = 50;
const REFUSAL_S: i64 = 10;
/// A schedule or a settlement check that takes longer (virtual time) is stuck.
const STEP_LIMIT: Duration = Duration::from_secs(900);
const EXECUTION_S: i64 = 30;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn judge(answer: &Answer) -> Result<(), String> {
    let verdict = match answer {
        Answer::Stream(bytes) => judge_stream(bytes),
        Answer::Whole(bytes) => judge_body(200, bytes),
        Answer::Failed(e) if e.status >= 400 && !e.message.is_empty() => Verdict::Error(e.status),
        Answer::Failed(e) => Verdict::Violation(format!("an untyped error: {e:?}")),
    };
    match verdict {
        Verdict::Violation(v) => Err(v),
        _ => Ok(()),
    }
}

fn is_ejected_or_probation(s: &HealthStatus) -> bool {
    matches!(
        s,
        HealthStatus::Ejected { .. } | HealthStatus::Probation { .. }
    )
}

async fn run_schedule(h: &Harness, n: u64, s: &Schedule) -> Result<(), String> {
    let repairing = h.snapshot("42").await;
    let mut before = Vec::new();
    for &i in &s.shared_only {
        let address = h.host(i).to_string();
        let state = h.participant(&h.host(i)).await.health.state;
        let diverged =
            repairing.repairs.contains(&address) || repairing.repairs_given_up.contains(&address);
        let b = match state {
            _ if diverged => Before::Unroutable,
            HealthStatus::Ejected { .. } => Before::Unroutable,
            HealthStatus::Healthy => Before::Healthy,
            HealthStatus::Suspect | HealthStatus::Probation { .. } => Before::Doubtful,
        };
        before.push((i, b));
    }
    let peers = peers(s);
    let successes_before = successes(h, &peers).await;
    for (hosts, f) in &s.faults {
        for &i in hosts {
            h.sim.set_faults(i, f.clone()).map_err(|e| e.to_string())?;
        }
    }
    let deadline = Duration::from_secs(300);
    let stream = h.chat(Harness::body(&format!("schedule {n} stream"), true));
    let whole = h.chat(Harness::body(&format!("schedule {n} whole"), false));
    let (a, b) = tokio::time::timeout(deadline, futures::future::join(stream, whole))
        .await
        .map_err(|_| "a request hung past 300 s (virtual)".to_string())?;
    judge(&a).map_err(|e| format!("invariant 2, stream: {e}"))?;
    judge(&b).map_err(|e| format!("invariant 2, whole: {e}"))?;
    let shared = Shared {
        can_strike: shared_can_strike(s),
        peer_answered: successes(h, &peers).await > successes_before,
    };
    let healthy_before = judged_after_shared(&before, shared);
    h.sim.clear_all_faults();
    // Like a client retrying: requests back to back until one succeeds, for 2 s (virtual).
    let cleared = tokio::time::Instant::now();
    let mut last = None;
    while cleared.elapsed() < Duration::from_secs(2) {
        let left = Duration::from_secs(2).saturating_sub(cleared.elapsed());
        let probe = h.chat(Harness::body(&format!("schedule {n} probe"), false));
        match tokio::time::timeout(left, probe).await {
            Ok(a) if a.is_success() => {
                last = None;
                break;
            }
            Ok(a) => last = Some(format!("{a:?}")),
            Err(_) => last = Some("no answer".into()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(last) = last {
        let snap = h.snapshot("42").await;
        let mut states = Vec::new();
        for i in 0..HOSTS {
            states.push(format!(
                "{i}: {:?}",
                h.participant(&h.host(i)).await.health.state
            ));
        }
        return Err(format!(
            "invariant 3: no success within 2 s of the clear (last: {last}; hosts {states:?}; \
             repairing {:?}, given up {:?}, panic mode {})",
            snap.repairs, snap.repairs_given_up, snap.panic_mode
        ));
    }
    for &i in &healthy_before {
        let state = h.participant(&h.host(i)).await.health.state;
        if is_ejected_or_probation(&state) {
            return Err(format!(
                "invariant 3: host {i} is {state:?} after a fault every faulted host shared"
            ));
        }
    }
    lockstep(h).await
}

/// The successes the participants of `hosts` have had, summed.
async fn successes(h: &Harness, hosts: &[usize]) -> u64 {
    let mut n = 0;
    for &i in hosts {
        let record = h.participant(&h.host(i)).await;
        n += record
            .outcomes
            .get(&OutcomeClass::Success)
            .copied()
            .unwrap_or(0);
    }
    n
}

/// Invariant 1 after a sync (forked, repairing and ejected hosts may lag, never lead). A diff
/// the escrow composes right after the sync (a timeout) may still be on its way: three tries.
async fn lockstep(h: &Harness) -> Result<(), String> {
    let mut result = Ok(());
    for _ in 0..3 {
        result = lockstep_once(h).await;
        if result.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    result
}

async fn lockstep_once(h: &Harness) -> Result<(), String> {
    h.escrow_addr("42")
        .await
        .send(SyncHosts)
        .await
        .map_err(|e| e.to_string())?;
    let snap = h.snapshot("42").await;
    for i in 0..HOSTS {
        let Some(view) = h.sim.host_view(i, "42") else {
            continue;
        };
        let address = h.host(i);
        let ejected = matches!(
            h.participant(&address).await.health.state,
            HealthStatus::Ejected { .. }
        );
        let excused = view.forked_at.is_some()
            || snap.repairs.contains(&address.to_string())
            || snap.repairs_given_up.contains(&address.to_string())
            || ejected;
        if view.latest_nonce > snap.nonce {
            return Err(format!(
                "invariant 1: host {i} at nonce {} beyond the escrow's {}",
                view.latest_nonce, snap.nonce
            ));
        }
        if view.latest_nonce == snap.nonce && hex::encode(view.state_root) != snap.state_root {
            return Err(format!(
                "invariant 1: host {i} on another root at nonce {}",
                snap.nonce
            ));
        }
        if view.latest_nonce < snap.nonce && !excused {
            return Err(format!(
                "invariant 1: host {i} at nonce {} behind the escrow's {} after a sync",
                view.latest_nonce, snap.nonce
            ));
        }
    }
    Ok(())
}

/// Invariant 4: past every deadline, nothing the escrow granted is left open. `Ok(Some(_))` is
/// what was left open (the known findings); `Err` any other broken invariant.
async fn settled(h: &Harness) -> Result<Option<String>, String> {
    let granted = h.snapshot("42").await.nonce;
    // Deadlines + the gateway's buffer + votes; one request every 5 s carries the timeout txs.
    for k in 0..((EXECUTION_S + 30) / 5) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _ = h.chat(Harness::body(&format!("carrier {k}"), false)).await;
    }
    lockstep(h).await?;
    let snap = h.snapshot("42").await;
    if !snap.pending_timeouts.is_empty() || !snap.pending_finishes.is_empty() {
        let (t, f) = (&snap.pending_timeouts, &snap.pending_finishes);
        return Ok(Some(format!(
            "pending timeouts {t:?} / finishes {f:?} past deadlines"
        )));
    }
    for i in 0..HOSTS {
        let Some(view) = h.sim.host_view(i, "42") else {
            continue;
        };
        if view.latest_nonce != snap.nonce {
            continue;
        }
        let open: Vec<u64> = view
            .state
            .records()
            .filter(|r| r.inference_id <= granted)
            .filter(|r| {
                matches!(
                    r.status,
                    InferenceStatus::Pending | InferenceStatus::Started
                )
            })
            .map(|r| r.inference_id)
            .collect();
        if !open.is_empty() {
            let first: Vec<u64> = open.iter().copied().take(8).collect();
            let n = open.len();
            return Ok(Some(format!(
                "host {i} holds {n} open inferences, first {first:?}"
            )));
        }
    }
    Ok(None)
}

fn network(block: u64) -> SimConfig {
    let mut cfg = SimConfig::with_seed(&format!("actor-props-{block}"));
    cfg.hosts = HOSTS;
    cfg.profile = Profile::Fast;
    cfg.output_tokens = 4;
    cfg.validation_rate = 0.0;
    cfg.epochs.epoch_length = 10_000_000;
    let mut session = SessionConfig::default_for_group(HOSTS);
    session.refusal_timeout = REFUSAL_S;
    session.execution_timeout = EXECUTION_S;
    cfg.session_config = Some(session);
    cfg
}

#[actix_rt::test]
async fn seeded_fault_schedules_keep_invariants_1_to_4() {
    tokio::time::pause();
    let total = env_u64("DEVSHARD_ACTOR_SCHEDULES", 250);
    let first = env_u64("DEVSHARD_ACTOR_SEED", 0);
    run_schedules(first, total).await;
}

/// Found by 10⁴ schedules (schedule 4163, invariant 3: "host 1 is Ejected after a fault every
/// faulted host shared"): hosts 3, 1 and 0 refused connections, but host 3 was ejected and host
/// 0 under repair by then, so no attempt reached them; the gateway saw host 1 refuse three
/// attempts while host 2 (not faulted) answered, which is host 1's own fault by the correlation
/// guard's rule (docs/health.md §1), and ejected it. The checker now judges a shared fault only
/// when at least two of its hosts were routable; the replay below failed before.
#[actix_rt::test]
async fn schedule_4163_a_refusal_only_one_routable_host_showed_is_that_hosts_own() {
    tokio::time::pause();
    let seen_alone = [
        (3, Before::Unroutable),
        (1, Before::Healthy),
        (0, Before::Unroutable),
    ];
    let no_peer = Shared {
        can_strike: true,
        peer_answered: false,
    };
    assert!(judged_after_shared(&seen_alone, no_peer).is_empty());
    let seen_by_two = [
        (3, Before::Doubtful),
        (1, Before::Healthy),
        (0, Before::Unroutable),
    ];
    assert_eq!(judged_after_shared(&seen_by_two, no_peer), vec![1]);
    run_schedules(4100, 64).await;
}

/// Failed CI's clean-clone run of `64efed2` (schedule 7259, invariant 3: "host 1 is Ejected
/// { level: 1 } after a fault every faulted host shared"): hosts 1 and 2 refused connections,
/// both healthy before. A host outside the fault answered between their refusals (the two
/// requests run at once, and which host answers when is the machine's timing: 16 replays
/// passed), so by relative evidence each refusal was its host's own, and the gateway ejected
/// host 1, the documented behaviour (docs/health.md §1). The checker now judges a fault that can
/// strike only when no host outside every fault answered while it lasted, as the chaos runner
/// does; a 403, 429 or 503 (which never strike) is judged whoever answered.
#[actix_rt::test]
async fn schedule_7259_a_refusal_two_hosts_showed_while_a_peer_answered_is_each_hosts_own() {
    let both_healthy = [(1, Before::Healthy), (2, Before::Healthy)];
    let peer_answered = Shared {
        can_strike: true,
        peer_answered: true,
    };
    assert!(judged_after_shared(&both_healthy, peer_answered).is_empty());
    let never_strikes = Shared {
        can_strike: false,
        peer_answered: true,
    };
    assert_eq!(
        judged_after_shared(&both_healthy, never_strikes),
        vec![1, 2]
    );
    let no_peer = Shared {
        can_strike: true,
        peer_answered: false,
    };
    assert_eq!(judged_after_shared(&both_healthy, no_peer), vec![1, 2]);
    // Schedule 7259 itself: its shared fault can strike, and hosts outside it exist.
    let s = schedule(7259);
    assert_eq!(s.shared_only, vec![1, 2], "{s:?}");
    assert!(shared_can_strike(&s));
    assert!(!peers(&s).is_empty(), "{s:?}");
}

/// Found by 10⁴ schedules (schedule 1175, invariant 3: "host 1 is Ejected after a fault every
/// faulted host shared"; CI's run failed the same way at schedule 5125): four hosts refused
/// connections, one attempt met a pooled connection the closing listener reset and the next a
/// refused connect; the socket messages made two fault signatures, the refusals were held as
/// each host's own and the next success struck host 1 three times. Connection-lost signatures
/// now keep only the typed reason (`policy/correlation/signature.rs`). Which attempt meets a pooled
/// connection depends on the machine's timing: this replay failed 4 runs of 4 on a quiet
/// machine before the fix.
#[actix_rt::test]
async fn schedule_1175_refusals_seen_as_reset_and_refused_are_one_shared_fault() {
    tokio::time::pause();
    run_schedules(1100, 76).await;
}

/// Runs `total` schedules from seed `first`, a fresh network every [`BLOCK`]; panics on the first
/// broken invariant with the schedule and how to replay it.
async fn run_schedules(first: u64, total: u64) {
    recent_log::keep_recent_log();
    let mut n = 0;
    let wall = std::time::Instant::now();
    while n < total {
        let mut h = Harness::start(network(first + n)).await;
        h.limits.receipt_timeout = Duration::from_secs(5);
        h.limits.stall_timeout = Duration::from_secs(5);
        h.limits.meta_drain = Duration::from_secs(5);
        let (start, end) = (n, (n + BLOCK).min(total));
        while n < end {
            let seed = first + n;
            let s = schedule(seed);
            let replay = format!(
                "replay: DEVSHARD_ACTOR_SEED={} DEVSHARD_ACTOR_SCHEDULES={}",
                first + start,
                n - start + 1
            );
            recent_log::mark_recent_log(format!("--- schedule {seed}"));
            let ran = tokio::time::timeout(STEP_LIMIT, run_schedule(&h, seed, &s)).await;
            let log = || {
                let lines = recent_log::recent_log().join("\n");
                format!("the gateway's last log lines (info and above):\n{lines}")
            };
            match ran {
                Err(_) => panic!(
                    "schedule {seed} {s:?}: stuck for {STEP_LIMIT:?}\n{replay}\n{}",
                    log()
                ),
                Ok(Err(e)) => panic!("schedule {seed} {s:?}: {e}\n{replay}\n{}", log()),
                Ok(Ok(())) => {}
            }
            n += 1;
            if n % SETTLE_EVERY == 0 {
                let nonce = h.snapshot("42").await.nonce;
                eprintln!(
                    "{n} schedules, {:.1} s wall, escrow nonce {nonce}",
                    wall.elapsed().as_secs_f64()
                );
            }
            if n % SETTLE_EVERY == 0 || n == end {
                let checked = tokio::time::timeout(STEP_LIMIT, settled(&h)).await;
                match checked.unwrap_or_else(|_| Err(format!("stuck for {STEP_LIMIT:?}"))) {
                    Err(e) => panic!("after schedule {seed}: {e}\n{replay}"),
                    Ok(Some(open)) => {
                        panic!("after schedule {seed}: invariant 4: {open}\n{replay}")
                    }
                    Ok(None) => {}
                }
            }
        }
    }
    eprintln!(
        "{total} seeded fault schedules from seed {first}: invariants 1–3 held, and 4 at each \
         of {} checks",
        total.div_ceil(SETTLE_EVERY)
    );
}

/// Found by the schedules above (seed 10): when every host reports a wrong state hash at once,
/// the escrow withheld all of them (divergence is outside the correlation guard and panic mode
/// may not race a diverged host) and requests failed with 502 "no routable host" until the first
/// repair tick, more than 2 s after the faults cleared. Fixed in `escrow/routing.rs`: an escrow
/// with no routable host has every repair tick at once (at most once a second), and hosts
/// ejected next to diverged ones are raced in panic mode.
#[actix_rt::test]
async fn every_host_reporting_a_wrong_state_hash_blocks_the_escrow() {
    tokio::time::pause();
    let h = Harness::start(network(0)).await;
    let lie = Faults {
        wrong_state_hash: true,
        ..Faults::default()
    };
    for i in 0..HOSTS {
        h.sim.set_faults(i, lie.clone()).unwrap();
    }
    for k in 0..HOSTS {
        let _ = h.chat(Harness::body(&format!("lie {k}"), false)).await;
    }
    h.sim.clear_all_faults();
    let s = Schedule {
        faults: Vec::new(),
        shared_only: Vec::new(),
    };
    run_schedule(&h, 0, &s).await.unwrap();
}

/// Found by 1 000 schedules in one process (the second network never started): dropping a
/// simulator woke its connections while each held its listener's watch guard, and the one that
/// dropped the last reference to the network then took that watch's write lock in the
/// listener's `shutdown`, a self-deadlock on the test thread (no timer left, so paused time
/// never advanced). Here: a network dropped after traffic, then a second one in the same
/// runtime, on a thread the test waits for (a deadlock blocks it for good).
#[test]
fn dropping_a_simulator_after_traffic_does_not_deadlock_the_next_one() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async {
            tokio::time::pause();
            for block in 0..3 {
                let h = Harness::start(network(block)).await;
                for k in 0..4 {
                    let body = Harness::body(&format!("block {block} request {k}"), k % 2 == 0);
                    assert!(h.chat(body).await.is_success());
                }
                drop(h);
                // Let the closing connections run before the next network starts.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(300))
        .expect("three simulators in a row finish (a hang is the listener self-deadlock)");
}

/// Found by the chaos runner at seed 12 ("host 4 at nonce 0 behind the gateway's 828 after a
/// sync"): a host that restarted empty answered the sync's catch-up with `session not found`,
/// which `SyncHosts` ignored, so it stayed at nonce 0 through every later sync. The sync now
/// resets that host's sync nonce, and the next sync replays it from nonce 1.
#[actix_rt::test]
async fn seed_12_a_host_restarted_empty_is_caught_up_by_the_next_sync() {
    tokio::time::pause();
    let h = Harness::start(network(0)).await;
    for k in 0..6 {
        assert!(h
            .chat(Harness::body(&format!("before {k}"), false))
            .await
            .is_success());
    }
    let forget = Faults {
        forget_session: true,
        ..Faults::default()
    };
    h.sim.set_faults(2, forget).unwrap();
    h.sim.clear_all_faults();
    assert!(h.sim.host_view(2, "42").is_none(), "host 2 restarted empty");
    let escrow = h.escrow_addr("42").await;
    escrow.send(SyncHosts).await.unwrap();
    escrow.send(SyncHosts).await.unwrap();
    let nonce = h.snapshot("42").await.nonce;
    let view = h
        .sim
        .host_view(2, "42")
        .expect("host 2 has the session again");
    assert_eq!(view.latest_nonce, nonce);
    lockstep(&h).await.unwrap();
}
