//! Tests of the error mapping table (`super`).
use devshard_actors::{
    outcome::OutcomeClass,
    policy::{correlation::FaultSignature, reason::OutcomeReason},
    race::{RaceErrorKind, RaceErrorKind as K},
};

use super::*;

fn race(kind: RaceErrorKind, retry_after_s: Option<u64>) -> ErrorParts {
    ApiError::Race(RaceError {
        kind,
        message: "m".into(),
        retry_after_s,
    })
    .parts()
}

/// Shared faults (moved here from the actors crate's correlation tests, where the status was
/// chosen before): seed 000's mass 403 owner mismatch → 502, every host overloaded → 503,
/// every host rejecting the request → 400.
#[test]
fn shared_faults_get_502_503_400() {
    let cases = [
        (
            OutcomeClass::EscrowFault,
            Some(403),
            OutcomeReason::NotEscrowOwner,
            502,
        ),
        (
            OutcomeClass::Overload,
            Some(503),
            OutcomeReason::RequestsDisabled,
            503,
        ),
        (
            OutcomeClass::RequestFault,
            Some(400),
            OutcomeReason::BadRequest,
            400,
        ),
    ];
    for (class, status, reason, want) in cases {
        let sig = FaultSignature::new(class, status, reason, "whatever");
        assert_eq!(race(K::Shared(sig.class), None).status, want, "{class:?}");
    }
}

#[test]
fn every_race_error_kind_has_its_row() {
    let cases = [
        (K::Saturated, None, 429, "rate_limit_exceeded", Some(1)),
        (K::EscrowUnavailable, Some(5), 503, UNAVAILABLE, Some(5)),
        (K::EscrowClosed, Some(5), 503, UNAVAILABLE, Some(5)),
        (K::Internal, None, 500, "internal_error", None),
        (K::HostsFailed, None, 502, UPSTREAM, None),
        (K::HostBusy, Some(7), 503, UPSTREAM, Some(7)),
        (K::Stalled, None, 504, "timeout", None),
        (K::Cancelled, None, 499, INVALID, None),
        (
            K::HostErrorEvent {
                host_status: Some(422),
            },
            None,
            422,
            INVALID,
            None,
        ),
        (
            K::HostErrorEvent {
                host_status: Some(504),
            },
            None,
            504,
            "timeout",
            None,
        ),
        (
            K::HostErrorEvent {
                host_status: Some(503),
            },
            None,
            503,
            UPSTREAM,
            Some(DEFAULT_RETRY_AFTER_S),
        ),
        (
            K::HostErrorEvent {
                host_status: Some(200),
            },
            None,
            502,
            UPSTREAM,
            None,
        ),
        (
            K::HostErrorEvent { host_status: None },
            None,
            502,
            UPSTREAM,
            None,
        ),
        (
            K::Shared(OutcomeClass::Overload),
            Some(13),
            503,
            UNAVAILABLE,
            Some(13),
        ),
    ];
    for (kind, retry, status, ty, want_retry) in cases {
        let p = race(kind, retry);
        assert_eq!(
            (p.status, p.kind.as_str(), p.code.as_str(), p.retry_after_s),
            (status, ty, ty, want_retry),
            "{kind:?}"
        );
    }
    let unreachable = race(K::HostsUnreachable, Some(2));
    assert_eq!(
        (
            unreachable.status,
            unreachable.kind.as_str(),
            unreachable.code.as_str(),
            unreachable.retry_after_s
        ),
        (503, UNAVAILABLE, "hosts_unreachable", Some(2))
    );
    let catching = race(K::HostsCatchingUp, Some(3));
    assert_eq!(
        (
            catching.status,
            catching.code.as_str(),
            catching.retry_after_s
        ),
        (503, "hosts_catching_up", Some(3))
    );
    assert_eq!(ApiError::RaceLost.parts().status, 502);
    let none = ApiError::NoActiveEscrow("m".into()).parts();
    assert_eq!((none.status, none.retry_after_s), (503, Some(30)));
}

#[test]
fn mid_stream_error_event_names_the_upstream_failure() {
    let event = stream_error_event("broke");
    let text = String::from_utf8_lossy(&event);
    assert!(text.starts_with("data: ") && text.contains(r#""type":"upstream_error""#));
    assert!(text.contains(r#""code":502"#) && text.contains("broke"));
}

#[test]
fn an_unavailable_database_is_503_with_retry_after_other_store_errors_500() {
    use devshard_actors::store::{StoreError, Unavailable};
    for reason in [
        Unavailable::Disconnected,
        Unavailable::CommitUnknown,
        Unavailable::QueueFull,
    ] {
        let e = ApiError::Directory(DirectoryError::Store(StoreError::Unavailable(reason)));
        let p = e.parts();
        assert_eq!((p.status, p.code.as_str()), (503, "database_unavailable"));
        assert_eq!(p.retry_after_s, Some(DATABASE_UNAVAILABLE_RETRY_AFTER_S));
        assert!(e.to_string().contains("database is unavailable"), "{e}");
        assert_eq!(e.body()["error"]["type"], "service_unavailable");
    }
    let io = ApiError::Directory(DirectoryError::Store(StoreError::Io("disk".into())));
    assert_eq!(io.parts().status, 500);
}

/// A stored escrow record read for an admin call: the store's own mapping (503 while it
/// reconnects, rather than the 500 these reads gave before), 500 for a record that does not
/// decode, and the message names the escrow and the record.
#[test]
fn an_escrow_record_read_maps_like_the_store_and_names_the_record() {
    use crate::escrows::RecordError;
    use devshard_actors::store::{StoreError, Unavailable};
    let down = ApiError::Record(RecordError::Store {
        escrow_id: "42".into(),
        record: "registration",
        source: StoreError::Unavailable(Unavailable::Disconnected),
    });
    let p = down.parts();
    assert_eq!((p.status, p.code.as_str()), (503, "database_unavailable"));
    assert!(
        down.to_string()
            .starts_with("reading escrow 42's registration: "),
        "{down}"
    );
    let bad = serde_json::from_str::<u64>("x").unwrap_err();
    let odd = ApiError::Record(RecordError::Unreadable {
        escrow_id: "42".into(),
        record: "archive",
        source: bad,
    });
    assert_eq!(
        (odd.parts().status, odd.parts().code.as_str()),
        (500, "internal_error")
    );
    assert!(
        odd.to_string()
            .contains("escrow 42's archive is unreadable"),
        "{odd}"
    );
}
