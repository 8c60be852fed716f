//! The fault guard's incidents: bursts of one host's failures, and shared outages.

use super::*;
use crate::{outcome::AttemptOutcome, policy::reason::OutcomeReason};

fn settled(host: &str, nonce: u64, class: OutcomeClass, reason: OutcomeReason) -> Settled {
    Settled {
        participant: Address::unchecked(host),
        outcome: AttemptOutcome {
            escrow_id: "42".into(),
            nonce,
            class,
            reason,
            timings: AttemptTimings::default(),
            finish_late_ms: None,
        },
        winner: false,
        request_id: format!("r{nonce}"),
    }
}

fn guard() -> FaultGuard {
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let metrics = ActorMetrics::detached().expect("metrics");
    FaultGuard::new(&HealthSettings::default(), log, metrics)
}

#[test]
fn hour_long_run_a_burst_of_one_hosts_identical_failures_confirmed_at_once_strikes_once() {
    let mut g = guard();
    let empty = |n| {
        settled(
            "gonka1down",
            n,
            OutcomeClass::HostFault,
            OutcomeReason::EmptyStream,
        )
    };
    for n in 0..14 {
        let f = g.emit_failure(empty(n), (5, 5), None, "empty stream", 1_000);
        assert!(f.held && f.send.is_empty());
    }
    // Another failure of that host, of another kind, is its own incident.
    let stalled = settled(
        "gonka1down",
        20,
        OutcomeClass::HostFault,
        OutcomeReason::Stalled,
    );
    g.emit_failure(stalled, (5, 5), None, "stalled", 1_000);
    let ok = settled(
        "gonka1peer",
        30,
        OutcomeClass::Success,
        OutcomeReason::Finished,
    );
    let sent = g.emit(ok, (5, 5), 1_500);
    let charged: Vec<_> = sent
        .iter()
        .filter(|(m, _)| m.outcome.class == OutcomeClass::HostFault && !m.shared)
        .map(|(m, _)| m.outcome.reason)
        .collect();
    assert_eq!(
        charged,
        vec![OutcomeReason::EmptyStream, OutcomeReason::Stalled],
        "one strike per incident"
    );
    let counted = sent
        .iter()
        .filter(|(m, _)| m.outcome.class == OutcomeClass::HostFault);
    assert_eq!(
        counted.count(),
        15,
        "every attempt still has its one outcome"
    );
    // Confirmed one by one (each by its own success), failures strike each time.
    let mut g = guard();
    let mut strikes = 0;
    for n in 0..3 {
        g.emit_failure(empty(n), (5, 5), None, "empty stream", 2_000 + n as i64);
        let ok = settled(
            "gonka1peer",
            100 + n,
            OutcomeClass::Success,
            OutcomeReason::Finished,
        );
        strikes += g
            .emit(ok, (5, 5), 2_100 + n as i64)
            .iter()
            .filter(|(m, _)| m.outcome.class == OutcomeClass::HostFault && !m.shared)
            .count();
    }
    assert_eq!(strikes, 3);
}

/// A connection `host` lost without an answer (its message is not part of the signature).
fn lose(
    g: &mut FaultGuard,
    host: &str,
    nonce: u64,
    reason: OutcomeReason,
    at: i64,
) -> FailureSettled {
    let s = settled(host, nonce, OutcomeClass::HostFault, reason);
    g.emit_failure(s, (5, 5), None, "lost", at)
}

/// The outcomes that would strike (host faults not sent as shared).
fn charged(sent: &[Outbound]) -> Vec<(String, OutcomeReason)> {
    sent.iter()
        .filter(|(m, _)| m.outcome.class == OutcomeClass::HostFault && !m.shared)
        .map(|(m, _)| (m.participant.to_string(), m.outcome.reason))
        .collect()
}

#[test]
fn rotating_long_run_a_host_down_with_others_is_not_struck_for_the_streams_it_lost() {
    let mut g = guard();
    let fail = |host: &str, n, reason| settled(host, n, OutcomeClass::HostFault, reason);
    let mut sent = Vec::new();
    // gonka1x's stream breaks before anyone knows the outage is shared: held.
    let f = g.emit_failure(
        fail("gonka1x", 1, OutcomeReason::Truncated),
        (5, 5),
        None,
        "stream ended before [DONE]",
        1_000,
    );
    assert!(f.held && f.send.is_empty());
    // gonka1x and gonka1y refuse connections: shared.
    let refused = |g: &mut FaultGuard, host, n, at| {
        g.emit_failure(
            fail(host, n, OutcomeReason::ConnectFailed),
            (5, 5),
            None,
            "connection refused",
            at,
        )
    };
    assert!(refused(&mut g, "gonka1x", 2, 1_005).held);
    let f = refused(&mut g, "gonka1y", 3, 1_006);
    assert!(f.shared.is_some());
    sent.extend(f.send);
    // gonka1x's other in-flight streams break in other ways: part of the outage.
    for (n, reason, message) in [
        (4, OutcomeReason::EmptyStream, "empty stream"),
        (5, OutcomeReason::Transport, "connection reset by peer"),
    ] {
        let f = g.emit_failure(fail("gonka1x", n, reason), (5, 5), None, message, 1_010);
        assert!(!f.held && f.shared.is_none(), "the race keeps fanning out");
        sent.extend(f.send);
    }
    // A 500 of gonka1x is not a lost connection: its own.
    let own = fail("gonka1x", 6, OutcomeReason::HostError);
    assert!(g.emit_failure(own, (5, 5), Some(500), "boom", 1_020).held);
    // gonka1z was not among the refusals, but no host outside the outage has succeeded since: the
    // stream it loses is the outage's too.
    let z = fail("gonka1z", 7, OutcomeReason::EmptyStream);
    let f = g.emit_failure(z, (5, 5), None, "empty stream", 1_020);
    assert!(
        !f.held && f.shared.is_none(),
        "excused, and the race fans out"
    );
    sent.extend(f.send);
    sent.extend(g.release_due(40_000));
    assert_eq!(
        charged(&sent),
        vec![("gonka1x".to_string(), OutcomeReason::HostError)],
        "only the fault that is not a lost connection strikes"
    );
    assert_eq!(sent.len(), 7, "every attempt still has its one outcome");
    // Once gonka1x succeeds, the streams it loses are its own again, within the window too.
    assert!(refused(&mut g, "gonka1x", 8, 50_000).held);
    assert!(refused(&mut g, "gonka1y", 9, 50_001).shared.is_some());
    let ok = settled(
        "gonka1x",
        10,
        OutcomeClass::Success,
        OutcomeReason::Finished,
    );
    g.emit(ok, (5, 5), 50_100);
    let f = g.emit_failure(
        fail("gonka1x", 11, OutcomeReason::Truncated),
        (5, 5),
        None,
        "stream ended before [DONE]",
        50_200,
    );
    assert!(f.held);
}

/// Found by the chaos runner (seed `14728273872760105528`, the clear at 88 s): every host went
/// down within 50 ms. The first host's streams broke and its connect was refused, all held; a
/// stream of the second host, sent 200 ms before, finished 13 ms before that host refused too,
/// and confirmed the first host's faults as three strikes: ejected for an outage all five
/// shared. Only a success sent after a failure breaks its correlation now.
#[test]
fn seed_14728273872760105528_a_stream_sent_before_the_outage_does_not_confirm_its_faults() {
    let mut g = guard();
    let at = |mut s: Settled, sent_ms: i64| {
        s.outcome.timings.send_ms = sent_ms;
        s
    };
    let fail = |host: &str, n, reason| settled(host, n, OutcomeClass::HostFault, reason);
    let mut sent = Vec::new();
    let lost = [
        (1, OutcomeReason::Transport, "connection reset by peer"),
        (2, OutcomeReason::Truncated, "stream ended before [DONE]"),
        (3, OutcomeReason::ConnectFailed, "connection refused"),
    ];
    for (n, reason, message) in lost {
        let f = g.emit_failure(
            fail("gonka1first", n, reason),
            (5, 5),
            None,
            message,
            22_430,
        );
        assert!(f.held);
        sent.extend(f.send);
    }
    // The second host's stream, sent before the outage, finishes: nothing is confirmed.
    let ok = settled(
        "gonka1second",
        4,
        OutcomeClass::Success,
        OutcomeReason::Finished,
    );
    let released = g.emit(at(ok, 22_250), (5, 5), 22_467);
    assert_eq!(released.len(), 1, "only the success itself: {released:?}");
    sent.extend(released);
    // 13 ms later it refuses too: the refusals are shared, the first host's lost streams with them.
    let refused = fail("gonka1second", 5, OutcomeReason::ConnectFailed);
    let f = g.emit_failure(refused, (5, 5), None, "connection refused", 22_480);
    assert!(f.shared.is_some());
    sent.extend(f.send);
    sent.extend(g.release_due(60_000));
    assert!(charged(&sent).is_empty(), "{:?}", charged(&sent));
    // A success sent after a held failure still confirms it: that failure is its host's own.
    let own = fail("gonka1first", 6, OutcomeReason::HostError);
    assert!(g.emit_failure(own, (5, 5), Some(500), "boom", 70_000).held);
    let ok = settled(
        "gonka1second",
        7,
        OutcomeClass::Success,
        OutcomeReason::Finished,
    );
    let confirmed = g.emit(at(ok, 70_010), (5, 5), 70_100);
    assert_eq!(
        charged(&confirmed),
        vec![("gonka1first".to_string(), OutcomeReason::HostError)]
    );
}

/// Found by the 30-minute chaos run `long-3` (invariant 3): hosts 1–4 were down for 2.3 s, and in
/// two escrows only two of them were routable. Their streams broke alike (empty streams, transport
/// errors), found shared, but an outage began only on shared refusals. One host's truncated stream
/// and refused connections were settled only when it answered again (a refusing host's nonces wait
/// for it), just before its own success: held, then confirmed by that success as two strikes per
/// escrow: ejected for an outage four hosts shared.
#[test]
fn long3_streams_broken_alike_begin_an_outage_and_its_host_is_not_struck_when_it_comes_back() {
    let mut g = guard();
    let fail = |host: &str, n, reason| settled(host, n, OutcomeClass::HostFault, reason);
    let mut sent = Vec::new();
    let broken = [
        ("gonka1x", 1, OutcomeReason::EmptyStream, 54_420),
        ("gonka1y", 2, OutcomeReason::EmptyStream, 54_421),
        ("gonka1y", 3, OutcomeReason::Transport, 54_430),
    ];
    for (host, n, reason, at) in broken {
        let f = g.emit_failure(fail(host, n, reason), (5, 2), None, "lost", at);
        assert_eq!(
            f.held,
            n == 1,
            "the first is held, then shared, then excused"
        );
        sent.extend(f.send);
    }
    // gonka1x's nonces are settled when it answers again.
    let late = [
        (4, OutcomeReason::Truncated, "stream ended before [DONE]"),
        (5, OutcomeReason::ConnectFailed, "connection refused"),
        (6, OutcomeReason::ConnectFailed, "connection refused"),
    ];
    for (n, reason, message) in late {
        let f = g.emit_failure(fail("gonka1x", n, reason), (5, 2), None, message, 57_160);
        assert!(!f.held && f.shared.is_none(), "excused; the race fans out");
        sent.extend(f.send);
    }
    let mut ok = settled("gonka1x", 7, OutcomeClass::Success, OutcomeReason::Finished);
    ok.outcome.timings.send_ms = 57_100;
    let back = g.emit(ok, (5, 2), 57_160);
    assert_eq!(back.len(), 1, "only the success itself: {back:?}");
    sent.extend(back);
    sent.extend(g.release_due(100_000));
    assert!(charged(&sent).is_empty(), "{:?}", charged(&sent));
}

/// What `long-3` also shows: with spare escrows, a host of an outage has streams in flight in
/// several escrows, and one escrow may see it fail only after another host of the outage came
/// back and succeeded, which cleared the failures it would have matched.
#[test]
fn a_host_that_loses_its_connections_after_a_peer_of_the_outage_came_back_is_not_struck() {
    let mut g = guard();
    let ok = |host: &str, n, sent_ms| {
        let mut s = settled(host, n, OutcomeClass::Success, OutcomeReason::Finished);
        s.outcome.timings.send_ms = sent_ms;
        s
    };
    let mut sent = Vec::new();
    for (host, n, at) in [("gonka1w", 1, 54_420), ("gonka1y", 2, 54_421)] {
        let f = lose(&mut g, host, n, OutcomeReason::ConnectFailed, at);
        sent.extend(f.send);
    }
    // gonka1y was in the outage: its success ends only its own part of it.
    sent.extend(g.emit(ok("gonka1y", 3, 56_700), (5, 5), 56_750));
    let lost = [
        (4, OutcomeReason::Truncated, 56_800),
        (5, OutcomeReason::ConnectFailed, 56_900),
    ];
    for (n, reason, at) in lost {
        let f = lose(&mut g, "gonka1x", n, reason, at);
        assert!(!f.held && f.shared.is_none(), "excused; the race fans out");
        sent.extend(f.send);
    }
    let back = g.emit(ok("gonka1x", 6, 57_100), (5, 5), 57_160);
    assert_eq!(back.len(), 1, "only the success itself: {back:?}");
    sent.extend(back);
    // gonka1y left the outage when it succeeded: what it loses now is its own.
    let f = lose(&mut g, "gonka1y", 7, OutcomeReason::Truncated, 57_170);
    assert!(f.held, "gonka1y left the outage when it succeeded");
    // A host outside the outage succeeds in an attempt sent after it began: the outage is over,
    // and gonka1y's held stream is confirmed as its own.
    let confirmed = g.emit(ok("gonka1z", 8, 57_200), (5, 5), 57_250);
    assert_eq!(
        charged(&confirmed),
        vec![("gonka1y".to_string(), OutcomeReason::Truncated)]
    );
    let f = lose(&mut g, "gonka1v", 9, OutcomeReason::Truncated, 57_300);
    assert!(f.held, "a host outside the outage after it ended: its own");
    // gonka1w never came back: still in the outage until the window passes.
    let f = lose(&mut g, "gonka1w", 10, OutcomeReason::ConnectFailed, 57_400);
    assert!(!f.held);
    sent.extend(f.send);
    assert!(charged(&sent).is_empty(), "{:?}", charged(&sent));
}
