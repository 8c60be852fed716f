//! Phase gating over hand-built views.

use std::collections::BTreeSet;

use devshard_actors::chain::{
    admission,
    snapshot::{parse_epoch, parse_participants},
    view::{ChainView, EpochSnapshot, ParticipantsSnapshot, VersionsSnapshot},
    Admission, ChainPollSettings, PhaseKind, PocMode,
};
use serde_json::json;

const T: i64 = 1_700_000_000_000;

/// A view observed at `T`: height 1000 in `phase` (raw PoC 990..1060), blocks of 6 s, two
/// participants serving model `m` (`gonka1a` preserved, `gonka1b` not).
fn view(phase: &str, cpoc: Option<&str>) -> ChainView {
    let epoch = json!({
        "block_height": 1000, "phase": phase,
        "latest_epoch": {"index": 10, "poc_start_block_height": 990},
        "epoch_stages": {"poc_validation_end": 1060, "set_new_validators": 1060},
        "active_confirmation_poc_event": cpoc.map(|p| json!({"phase": p, "trigger_height": 995})),
    });
    let participants = json!({"active_participants": {"participants": [
        {"index": "gonka1a", "inference_url": "http://a", "models": ["m"],
         "ml_nodes": [{"ml_nodes": [{"node_id": "na", "timeslot_allocation": [true, true]}]}]},
        {"index": "gonka1b", "inference_url": "http://b", "models": ["m"],
         "ml_nodes": [{"ml_nodes": [{"node_id": "nb", "timeslot_allocation": [true, false]}]}]},
    ]}});
    let info = parse_epoch(epoch.to_string().as_bytes()).unwrap();
    let mut v = ChainView::empty("http://api", ChainPollSettings::default(), T);
    v.epoch = Some(EpochSnapshot::new(info, T, 6_000));
    v.participants = Some(ParticipantsSnapshot {
        participants: parse_participants(participants.to_string().as_bytes()).unwrap(),
        observed_at_ms: T,
        epoch_index: Some(10),
    });
    v
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn nothing_known_or_inference_serves() {
    let empty = ChainView::empty("http://api", ChainPollSettings::default(), T);
    assert_eq!(admission(&empty, PocMode::Off, "m", T), Admission::Serve);
    let v = view("Inference", None);
    assert_eq!(admission(&v, PocMode::Off, "m", T), Admission::Serve);
    let done = view("Inference", Some("CONFIRMATION_POC_COMPLETED"));
    assert_eq!(admission(&done, PocMode::Off, "m", T), Admission::Serve);
}

#[test]
fn poc_is_refused_until_the_expected_end() {
    let v = view("PoCGenerate", None);
    // 60 blocks × 6 s after T; asked 10 s later.
    assert_eq!(
        admission(&v, PocMode::Off, "m", T + 10_000),
        Admission::Refuse {
            retry_after_s: 350,
            phase: PhaseKind::PoC,
            message: "devshard temporarily unavailable during PoC generation".into(),
        }
    );
    // Past the expected end but the snapshot is still fresh: come back after the next poll
    // (here, without a schedule in the view, one phase interval).
    let mut ending = view("PoCValidateWindDown", None);
    ending.epoch.as_mut().unwrap().poc_end_ms = Some(T + 5_000);
    match admission(&ending, PocMode::Off, "m", T + 10_000) {
        Admission::Refuse {
            retry_after_s,
            message,
            ..
        } => {
            assert_eq!(retry_after_s, 20);
            assert!(message.ends_with("PoC validation wind down"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Any wire shape the edge may log.
    let json = serde_json::to_value(admission(&v, PocMode::Off, "m", T)).unwrap();
    assert_eq!(json["admission"], "refuse");
    assert_eq!(json["retry_after_s"], 360);
    assert_eq!(json["phase"], "poc");
}

#[test]
fn confirmation_poc_is_refused_with_the_poll_interval_as_retry_after() {
    let v = view("Inference", Some("CONFIRMATION_POC_GENERATION"));
    assert_eq!(
        admission(&v, PocMode::Off, "m", T),
        Admission::Refuse {
            retry_after_s: 20,
            phase: PhaseKind::ConfirmationPoC,
            message: "devshard temporarily unavailable during confirmation PoC generation".into(),
        }
    );
}

#[test]
fn a_stale_phase_stops_gating_only_past_its_bound() {
    let v = view("PoCGenerate", None);
    // Bound: 5 × 20 s.
    assert!(matches!(
        admission(&v, PocMode::Off, "m", T + 100_000),
        Admission::Refuse { .. }
    ));
    assert_eq!(
        admission(&v, PocMode::Off, "m", T + 100_001),
        Admission::Serve
    );
    assert!(v.epoch_stale(T + 100_001));
}

#[test]
fn relaxed_serves_preserved_hosts_and_refuses_without_them() {
    let v = view("PoCGenerate", None);
    assert_eq!(
        admission(&v, PocMode::Relaxed, "m", T),
        Admission::ServeOnly {
            preserved: set(&["gonka1a"]),
            phase: PhaseKind::PoC
        }
    );
    match admission(&v, PocMode::Relaxed, "other", T) {
        Admission::Refuse { message, .. } => {
            assert!(
                message.contains("no host preserved for model other"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    // A stale participants list (bound 5 × 60 s) cannot say who is preserved.
    let mut old = view("PoCGenerate", None);
    old.participants.as_mut().unwrap().observed_at_ms = T - 300_001;
    match admission(&old, PocMode::Relaxed, "m", T) {
        Admission::Refuse { message, .. } => assert!(message.contains("participants"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn relaxed_validation_readmits_capable_nodes_from_fresh_versions_only() {
    let mut v = view("PoCValidate", None);
    v.versions.insert(
        "gonka1b".into(),
        VersionsSnapshot {
            nodes: [("nb".to_string(), true)].into(),
            observed_at_ms: T,
        },
    );
    let both = Admission::ServeOnly {
        preserved: set(&["gonka1a", "gonka1b"]),
        phase: PhaseKind::PoC,
    };
    assert_eq!(admission(&v, PocMode::Relaxed, "m", T), both);
    // Not in generation: versions only matter for validation.
    let mut gen = v.clone();
    gen.epoch = view("PoCGenerate", None).epoch;
    assert!(matches!(
        admission(&gen, PocMode::Relaxed, "m", T),
        Admission::ServeOnly { preserved, .. } if preserved == set(&["gonka1a"])
    ));
    // Versions older than 5 × 300 s no longer count.
    v.versions.get_mut("gonka1b").unwrap().observed_at_ms = T - 1_500_001;
    assert!(matches!(
        admission(&v, PocMode::Relaxed, "m", T),
        Admission::ServeOnly { preserved, .. } if preserved == set(&["gonka1a"])
    ));
}

#[test]
fn the_view_serializes_for_the_debug_endpoint() {
    let v = view("PoCGenerate", None);
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["epoch"]["phase_kind"], "poc");
    assert_eq!(json["epoch"]["info"]["phase"], "PoCGenerate");
    assert_eq!(json["epoch"]["poc_end_ms"], T + 360_000);
    assert_eq!(json["settings"]["chain_phase_poll_interval_ms"], 20_000);
    assert!(json["participants"]["participants"]["gonka1a"].is_object());
}

#[test]
fn the_poller_and_its_view_cross_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<devshard_actors::chain::ChainPoller>();
    send_sync::<ChainView>();
    send_sync::<devshard_actors::chain::HostGates>();
}
