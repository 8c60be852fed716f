//! The correlation guard: seed 000 (every host answers 403 owner mismatch → no strike, one clear
//! message), held failures and their confirmation, normalisation, and the cause messages.

use devshard_actors::{
    outcome::OutcomeClass,
    policy::{
        correlation::{cause_message, normalise, FaultSignature, SharedFault, SharedFaultDetector},
        health::{on_outcome, EjectionContext, HealthState, OutcomeFacts},
        reason::OutcomeReason,
    },
};

use super::common::{settings, T0};

fn owner_403() -> FaultSignature {
    FaultSignature::new(
        OutcomeClass::EscrowFault,
        Some(403),
        OutcomeReason::NotEscrowOwner,
        "restricted to escrow owner",
    )
}

fn shared(signature: FaultSignature) -> SharedFault {
    SharedFault {
        signature,
        hosts: vec!["a".into(), "b".into()],
        retry_after_ms: None,
    }
}

#[test]
fn seed_000_mass_403_is_shared_strikes_nobody_and_names_the_cause() {
    let s = settings();
    let mut d: SharedFaultDetector = SharedFaultDetector::new(&s);
    let hosts = [
        "y5fs9j0r", "xsz307ef", "zena4439", "vq8mg6gt", "ag64jcz4", "9umz0l4g",
    ];
    assert_eq!(
        d.record_failure(hosts[0].into(), owner_403(), T0),
        None,
        "one host: held"
    );
    assert_eq!(d.held(), 1);
    let mut last = None;
    for (i, h) in hosts.iter().enumerate().skip(1) {
        last = d.record_failure((*h).into(), owner_403(), T0 + 500 * i as i64);
        assert!(last.is_some(), "host {i} makes it shared");
    }
    let fault = last.unwrap();
    assert_eq!(fault.hosts.len(), 6);
    assert_eq!(d.held(), 0, "the first host's held failure was retracted");
    assert!(
        d.release_due(T0 + 3_600_000).is_empty(),
        "nothing is ever confirmed"
    );
    assert_eq!(
        cause_message(&fault),
        "all hosts rejected the request: restricted to escrow owner — the gateway's signing key is not the escrow owner"
    );
    // The client's status for it (502) is chosen at the edge: src/http/error.rs tests.
    // Even if the first failure had been charged directly, an escrow fault carries no strike.
    let (h, effects) = on_outcome(
        &HealthState::default(),
        &OutcomeFacts::new(OutcomeClass::EscrowFault, OutcomeReason::NotEscrowOwner),
        &EjectionContext::default(),
        &s,
        T0,
        0.0,
    );
    assert_eq!((h, effects), (HealthState::default(), vec![]));
}

#[test]
fn single_host_faults_are_confirmed_by_a_success_or_by_the_window() {
    let s = settings();
    let drift = |n: u32| {
        FaultSignature::new(
            OutcomeClass::HostFault,
            Some(401),
            OutcomeReason::TimestampDrift,
            &format!("timestamp drift {n}s exceeds maximum 30s"),
        )
    };
    let mut d: SharedFaultDetector = SharedFaultDetector::new(&s);
    assert_eq!(d.record_failure("a".into(), drift(45), T0), None);
    assert_eq!(d.next_release(), Some(T0 + 30_001));
    assert!(d.release_due(T0 + 30_000).is_empty());
    let confirmed = d.release_due(T0 + 30_001);
    assert_eq!(confirmed.len(), 1);
    assert_eq!((confirmed[0].host.as_str(), confirmed[0].at_ms), ("a", T0));
    // A peer's success in between breaks the correlation and confirms the held failure.
    assert_eq!(d.record_failure("a".into(), drift(45), T0 + 40_000), None);
    assert_eq!(
        d.record_success(&"c".to_string(), T0 + 41_000, T0 + 41_000)
            .len(),
        1
    );
    assert_eq!(
        d.record_failure("b".into(), drift(47), T0 + 42_000),
        None,
        "not shared across a success"
    );
    // Two hosts within the window, numbers differing: shared clock drift.
    let fault = d
        .record_failure("c".into(), drift(51), T0 + 43_000)
        .unwrap();
    assert_eq!(fault.hosts, ["b", "c"]);
    assert_eq!(
        cause_message(&fault),
        "all hosts rejected the request: timestamp drift — the gateway's clock is off (hosts reject its timestamps)"
    );
    // The same host failing twice is not shared; outside the window it is not either.
    let mut d: SharedFaultDetector = SharedFaultDetector::new(&s);
    assert_eq!(d.record_failure("a".into(), drift(1), T0), None);
    assert_eq!(d.record_failure("a".into(), drift(2), T0 + 1), None);
    assert_eq!(d.record_failure("b".into(), drift(3), T0 + 40_000), None);
    assert_eq!(d.release_due(T0 + 100_000).len(), 3);
}

#[test]
fn normalise_strips_numbers_and_case() {
    assert_eq!(
        normalise("Timestamp drift 45s exceeds maximum 30s"),
        "timestamp drift # exceeds maximum #"
    );
    assert_eq!(
        normalise("timestamp  drift 47s exceeds maximum 30s\n"),
        normalise("Timestamp drift 45s exceeds maximum 30s")
    );
    assert_eq!(
        normalise("escrow gonka1qy352eufqy352euf not found"),
        "escrow # not found"
    );
    assert_eq!(normalise(&"x".repeat(1_000)).len(), 200);
}

#[test]
fn cause_messages_name_the_shared_cause() {
    let cases = [
        (
            OutcomeClass::HostFault,
            Some(404),
            OutcomeReason::NotFound,
            "the escrow's hosts do not serve devshard at this route",
        ),
        (
            OutcomeClass::EscrowFault,
            Some(500),
            OutcomeReason::EscrowNotFound,
            "the escrow does not exist on chain",
        ),
        (
            OutcomeClass::EscrowFault,
            Some(403),
            OutcomeReason::SenderNotInGroup,
            "not in the escrow's group",
        ),
        (
            OutcomeClass::HostFault,
            Some(404),
            OutcomeReason::SessionNotFound,
            "do not know its session",
        ),
    ];
    for (class, status, reason, cause) in cases {
        let msg = cause_message(&shared(FaultSignature::new(
            class, status, reason, "whatever",
        )));
        assert!(
            msg.starts_with("all hosts rejected the request: ") && msg.contains(cause),
            "{msg}"
        );
    }
    let busy = SharedFault {
        retry_after_ms: Some(12_300),
        ..shared(FaultSignature::new(
            OutcomeClass::Overload,
            Some(503),
            OutcomeReason::RequestsDisabled,
            "",
        ))
    };
    assert_eq!(
        cause_message(&busy),
        "all hosts rejected the request: overloaded — every host is overloaded or paused (retry after 13 s)"
    );
    let down = shared(FaultSignature::new(
        OutcomeClass::HostFault,
        None,
        OutcomeReason::ConnectFailed,
        "connection refused",
    ));
    assert_eq!(
        cause_message(&down),
        "all hosts failed: unreachable — no host could be reached"
    );
    let other = shared(FaultSignature::new(
        OutcomeClass::HostFault,
        Some(502),
        OutcomeReason::HostError,
        "Bad gateway 17",
    ));
    assert!(cause_message(&other).ends_with("every host failed the same way [502: bad gateway #]"));
}

/// Run J (seed `long-1`, 576 s): four hosts restarted empty and two of them answered nonce gaps
/// (`invalid nonce: must be sequential`); the guard took them for a shared fault, stopped the
/// races' fan-out and 30 requests got 502 while a fifth host could serve. A nonce gap or a lost
/// session is what one host holds: never shared.
#[test]
fn run_j_nonce_gaps_of_hosts_that_restarted_empty_are_never_a_shared_fault() {
    let s = settings();
    let mut d: SharedFaultDetector = SharedFaultDetector::new(&s);
    let own = |reason, message: &str| {
        FaultSignature::new(OutcomeClass::HostFault, Some(500), reason, message)
    };
    let gap = |n: u64| {
        let message =
            format!("apply diff nonce {n}: invalid nonce: must be sequential: expected 1, got {n}");
        own(OutcomeReason::NonceGap, &message)
    };
    assert_eq!(d.record_failure("a".into(), gap(7_401), T0), None);
    assert_eq!(d.record_failure("b".into(), gap(7_402), T0 + 1), None);
    assert_eq!(d.record_failure("c".into(), gap(7_403), T0 + 2), None);
    let lost = || own(OutcomeReason::SessionNotFound, "session not found");
    assert_eq!(d.record_failure("a".into(), lost(), T0 + 3), None);
    assert_eq!(d.record_failure("b".into(), lost(), T0 + 4), None);
    // Held as each host's own, as any unshared fault.
    assert_eq!(d.held(), 5);
}

/// Found by 10⁴ actor schedules (schedule 1175, invariant 3: "host 1 is Ejected after a fault
/// every faulted host shared"): four hosts refused connections; one attempt met a pooled
/// connection that the closing listener reset, the next a refused connect. The two socket
/// messages made two signatures, so neither refusal was shared, and the next success confirmed
/// both with the streams the host lost: three strikes. A connection lost without an answer is
/// its typed reason, whatever the socket layer says.
#[test]
fn schedule_1175_a_reset_pooled_connection_and_a_refused_connect_are_one_shared_refusal() {
    let s = settings();
    let mut d: SharedFaultDetector = SharedFaultDetector::new(&s);
    let refused = |message: &str| {
        FaultSignature::new(
            OutcomeClass::HostFault,
            None,
            OutcomeReason::ConnectFailed,
            message,
        )
    };
    let reset =
        refused("connect to host failed: i/o error: connection reset by peer (os error 104)");
    let fresh = refused(
        "connect to host failed: failed to connect to host: connection refused (os error 111)",
    );
    assert_eq!(reset, fresh);
    assert_eq!(d.record_failure("a".into(), reset, T0), None);
    let shared = d.record_failure("b".into(), fresh, T0 + 5);
    assert_eq!(shared.map(|f| f.hosts), Some(vec!["a".into(), "b".into()]));
    assert_eq!(d.held(), 0);
    // A host's answer keeps its message: two different 502 bodies are two faults.
    let answered = |message: &str| {
        FaultSignature::new(
            OutcomeClass::HostFault,
            Some(502),
            OutcomeReason::HostError,
            message,
        )
    };
    assert_ne!(answered("bad gateway"), answered("model crashed"));
}
