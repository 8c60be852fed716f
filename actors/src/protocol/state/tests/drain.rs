//! The v4.1 settlement drain (docs/versions.md) against v2, which folds live records unchanged.

use super::*;
use crate::protocol::{
    proto::MsgFinalizeRound,
    state::{InferenceStatus, Phase},
    version::ProtocolVersion,
};

/// A session with one Pending record (no receipt), one Started record (confirmed on slot 2)
/// and one Finished record, driven to Settlement. Returns the fixture and the balance and
/// executor costs just before settlement.
fn settle(protocol: ProtocolVersion) -> (Fx, u64, u64, u64) {
    let cfg = SessionConfig {
        protocol,
        ..SessionConfig::default_for_group(3)
    };
    let mut fx = Fx::with_config(&[0, 1, 2], cfg);
    let pending = fx.start(10, 20); // nonce 1, executor slot 1, reserve 30
    assert_eq!(
        fx.sm.record(pending).unwrap().status,
        InferenceStatus::Pending
    );
    let started = fx.start(7, 3); // nonce 2, executor slot 2, reserve 10
    fx.ok(vec![fx.confirm(started, T0 + 1)]);
    assert_eq!(
        fx.sm.record(started).unwrap().status,
        InferenceStatus::Started
    );
    fx.finished(1, 1);
    fx.ok(vec![tx(Tx::FinalizeRound(MsgFinalizeRound {}))]);
    fx.tick();
    fx.tick();
    assert_eq!(fx.sm.phase(), Phase::Finalizing);
    let before = (
        fx.sm.balance(),
        fx.sm.host_stats(1).cost,
        fx.sm.host_stats(2).cost,
    );
    fx.tick();
    assert_eq!(fx.sm.phase(), Phase::Settlement);
    (fx, before.0, before.1, before.2)
}

#[test]
fn v4_1_drain_pays_started_and_refunds_pending() {
    let (fx, balance, cost1, cost2) = settle(ProtocolVersion::V4_1);
    assert_eq!(
        fx.sm.balance(),
        balance + 30,
        "Pending reservation refunded"
    );
    assert_eq!(
        fx.sm.host_stats(1).cost,
        cost1,
        "nothing paid for a Pending record"
    );
    assert_eq!(
        fx.sm.host_stats(1).missed,
        0,
        "a drained Pending record is no miss"
    );
    assert_eq!(
        fx.sm.host_stats(2).cost,
        cost2 + 10,
        "Started paid its reservation"
    );
    assert_eq!(
        fx.sm.records().count(),
        0,
        "everything sealed after the drain"
    );
}

#[test]
fn v2_settlement_folds_live_records_unchanged() {
    let (fx, balance, cost1, cost2) = settle(ProtocolVersion::V2);
    assert_eq!(fx.sm.balance(), balance);
    assert_eq!(
        (fx.sm.host_stats(1).cost, fx.sm.host_stats(2).cost),
        (cost1, cost2)
    );
    let (v41, ..) = settle(ProtocolVersion::V4_1);
    assert_ne!(
        fx.sm.sealed_acc(),
        v41.sm.sealed_acc(),
        "drained entries differ"
    );
}
