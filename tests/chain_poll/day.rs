//! Invariant 10 against the simulated chain: a simulated day with default settings, three escrows
//! reading the snapshots and seven miners. Every request is taken from the simulator's request
//! log (server side, virtual time), hour by hour.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use devshard_actors::{
    chain::{
        admission, Admission, ChainChange, ChainPollSettings, ChainView, GetSnapshot, PocMode,
    },
    clock::TokioClock,
};
use devshard_gateway::sim::{ChainRequest, EpochSchedule, Profile, SimConfig, SimNetwork};

use crate::harness::{gaps, Polling, T0_MS};

const HOUR_MS: i64 = 3_600_000;

/// `(height, phase)` of every phase boundary of the default schedule within `heights`.
fn boundaries(s: &EpochSchedule, from: u64, to: u64) -> Vec<(u64, &'static str)> {
    let mut out = Vec::new();
    for epoch in from / s.epoch_length..=to / s.epoch_length {
        let start = epoch * s.epoch_length;
        let g = s.poc_generate_blocks;
        let gwd = g + s.poc_generate_wind_down_blocks;
        let v = gwd + s.poc_validate_blocks;
        let vwd = v + s.poc_validate_wind_down_blocks;
        for (off, phase) in [
            (0, "PoCGenerate"),
            (g, "PoCGenerateWindDown"),
            (gwd, "PoCValidate"),
            (v, "PoCValidateWindDown"),
            (vwd, "Inference"),
        ] {
            let h = start + off;
            if h > from && h <= to {
                out.push((h, phase));
            }
        }
    }
    out
}

/// Largest number of requests in any 60 s window (`times` sorted).
fn max_per_minute(times: &[i64]) -> usize {
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|&&t| t < times[i] + 60_000)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[actix_rt::test]
async fn a_simulated_day_stays_within_six_per_minute_and_sees_every_phase() {
    tokio::time::pause();
    let wall = std::time::Instant::now();
    let clock = TokioClock::anchored_at(T0_MS).shared();
    let mut cfg = SimConfig::with_seed("chain-day");
    cfg.hosts = 7;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = vec!["1".into(), "2".into(), "3".into()];
    let schedule = cfg.epochs.clone();
    let net = SimNetwork::start(cfg, clock.clone()).await.unwrap();
    let h0 = net.epoch().block_height;
    let p = Polling::start(net.chain_url(), ChainPollSettings::default(), clock.clone());

    // Three escrows read the snapshot every 5 s and decide admission from it; the decision from
    // the last pushed view (what a subscriber caches) must be the same.
    let decisions: Arc<Mutex<Vec<(i64, bool, bool)>>> = Arc::default();
    for _ in 0..3 {
        let (poller, clock, decisions) = (p.poller.clone(), clock.clone(), decisions.clone());
        let pushed = p.latest.clone();
        actix_rt::spawn(async move {
            let refused = |view: &ChainView, now| {
                matches!(
                    admission(view, PocMode::Off, "any", now),
                    Admission::Refuse { .. }
                )
            };
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let Ok(view) = poller.send(GetSnapshot).await else {
                    return;
                };
                let now = clock.now_ms();
                let cached = pushed.lock().unwrap().clone().unwrap();
                let entry = (now, refused(&view, now), refused(&cached, now));
                decisions.lock().unwrap().push(entry);
            }
        });
    }

    let mut log: Vec<ChainRequest> = Vec::new();
    for _ in 0..24 {
        tokio::time::sleep(Duration::from_millis(HOUR_MS as u64)).await;
        let hour = net.chain_requests();
        net.reset_chain_requests();
        assert_eq!(
            hour.recent.len() as u64,
            hour.total,
            "the log kept every request"
        );
        log.extend(hour.recent);
    }
    let end_ms = clock.now_ms();

    // 1. At most 6 requests to the public API in any 60 s window.
    let api: Vec<i64> = log
        .iter()
        .filter(|r| r.server == "chain")
        .map(|r| r.at_ms)
        .collect();
    assert!(api.len() > 24 * 60 * 4, "{} public API requests", api.len());
    assert!(
        max_per_minute(&api) <= 6,
        "max {} per minute",
        max_per_minute(&api)
    );
    // 2. Each miner's /v1/versions at most once per 4 minutes (and regularly).
    for host in 0..7 {
        let server = format!("host-{host}");
        let times: Vec<i64> = log
            .iter()
            .filter(|r| r.server == server && r.path == "/v1/versions")
            .map(|r| r.at_ms)
            .collect();
        assert!(times.len() >= 24 * 60 / 5 - 30, "{server}: {}", times.len());
        let shortest = gaps(&times).into_iter().min().unwrap();
        assert!(shortest >= 240_000, "{server}: gap {shortest} ms");
    }
    // 3. Every phase transition seen within one (jittered) interval.
    let changes = p.changes();
    let seen: Vec<(i64, &str, u64)> = changes
        .iter()
        .filter_map(|(t, c)| match c {
            ChainChange::PhaseChanged {
                to, block_height, ..
            } => Some((*t, to.as_str(), *block_height)),
            _ => None,
        })
        .collect();
    let h_end = h0 + u64::try_from(end_ms - T0_MS - 30_000).unwrap() / schedule.block_time_ms;
    let expected = boundaries(&schedule, h0, h_end);
    assert_eq!(expected.len(), 24 * 5 - 1, "{expected:?}");
    let mut worst_delay = 0;
    for (h, phase) in &expected {
        let happened = T0_MS + i64::try_from((h - h0) * schedule.block_time_ms).unwrap();
        let (t, _, _) = seen
            .iter()
            .find(|(t, to, bh)| to == phase && bh >= h && *t >= happened)
            .unwrap_or_else(|| panic!("transition to {phase} at height {h} never seen"));
        assert!(
            t - happened <= 22_000,
            "{phase} at {h} seen after {} ms",
            t - happened
        );
        worst_delay = worst_delay.max(t - happened);
    }
    // No spurious change: the initial phase, then each phase's successor, in order.
    let cycle = [
        "Inference",
        "PoCGenerate",
        "PoCGenerateWindDown",
        "PoCValidate",
        "PoCValidateWindDown",
    ];
    for w in seen.windows(2) {
        let i = cycle.iter().position(|p| *p == w[0].1).unwrap();
        assert_eq!(
            w[1].1,
            cycle[(i + 1) % cycle.len()],
            "{:?} then {:?}",
            w[0],
            w[1]
        );
    }
    let changes_seen = seen.len() - 1; // the first is the initial phase
    assert!((expected.len()..=expected.len() + 1).contains(&changes_seen));
    // 4. Participants refreshed right after every epoch change.
    let participants: Vec<i64> = log
        .iter()
        .filter(|r| r.path == "/v1/epochs/current/participants")
        .map(|r| r.at_ms)
        .collect();
    for (t, c) in &changes {
        if matches!(c, ChainChange::EpochChanged { from: Some(_), .. }) {
            assert!(participants.iter().any(|&pt| pt >= *t && pt <= t + 15_000));
        }
    }
    // 5. The escrows refused exactly while PoC was observed: never more than one interval off.
    let decisions = decisions.lock().unwrap().clone();
    assert!(decisions.len() > 3 * 17_000);
    let in_poc = |t: i64| {
        let h = h0 + u64::try_from(t - T0_MS).unwrap() / schedule.block_time_ms;
        h % schedule.epoch_length < schedule.poc_blocks()
    };
    for (t, refused, cached) in decisions {
        assert_eq!(
            refused, cached,
            "a subscriber's cached view decides the same at {t}"
        );
        if t - T0_MS > 22_000 && in_poc(t) == in_poc(t - 22_000) {
            assert_eq!(refused, in_poc(t), "admission at {t}");
        }
    }
    eprintln!(
        "simulated day: {} public API requests (max {} in a 60 s window), {} versions requests, \
         {} transitions, seen at most {worst_delay} ms late, deferred by the budget: {} phase \
         polls, {} participants polls; wall {:?}",
        api.len(),
        max_per_minute(&api),
        log.len() - api.len(),
        expected.len(),
        p.metric(
            "chain_poll_deferred_total",
            &[("endpoint", "epochs_latest")]
        ),
        p.metric("chain_poll_deferred_total", &[("endpoint", "participants")]),
        wall.elapsed()
    );
    let view = p.view().await;
    assert_eq!(view.endpoints.len(), 2 + 7);
    assert!(view.endpoints.iter().all(|e| !e.stale));
    assert!(
        wall.elapsed() < Duration::from_secs(60),
        "a simulated day took {:?}",
        wall.elapsed()
    );
}
