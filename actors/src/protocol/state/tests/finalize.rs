//! Finalize → Settlement, auto-seal, the state clock and the state root composition.

use super::*;
use crate::protocol::{
    crypto::sha256,
    proto::MsgFinalizeRound,
    state::{fold_sealed, InferenceStatus, Phase},
};

fn finalize() -> DevshardTx {
    tx(Tx::FinalizeRound(MsgFinalizeRound {}))
}

#[test]
fn finalize_then_settlement_drains_every_live_record() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let ghost = fx.start(10, 10);
    let done = fx.finished(5, 5);
    let (b, f) = (fx.sm.balance(), fx.sm.fees());
    fx.ok(vec![finalize()]);
    let fin = fx.sm.latest_nonce();
    assert_eq!(
        (fx.sm.phase(), fx.sm.finalize_nonce()),
        (Phase::Finalizing, fin)
    );
    assert_eq!(
        (fx.sm.balance(), fx.sm.fees()),
        (b, f),
        "no fee once finalizing"
    );
    fx.rejects(vec![finalize()], |e| *e == StateError::AlreadyFinalizing);
    // Host txs still apply while finalizing.
    fx.ok(vec![fx.confirm(ghost, T0 + 9)]);
    fx.tick();
    assert_eq!(fx.sm.phase(), Phase::Finalizing);
    let entries: Vec<(u64, Vec<u8>)> = fx
        .sm
        .records()
        .map(|r| (r.inference_id, r.entry_bytes()))
        .collect();
    assert_eq!(
        entries.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![ghost, done]
    );
    fx.tick(); // latest = fin + N
    assert_eq!(fx.sm.phase(), Phase::Settlement);
    assert_eq!(fx.sm.latest_nonce(), fin + 3);
    let mut acc = [0u8; 32];
    for (id, entry) in &entries {
        acc = fold_sealed(&acc, fin + 3, *id, entry);
    }
    assert_eq!(fx.sm.sealed_acc(), acc);
    assert_eq!((fx.sm.records().count(), fx.sm.sealed_count()), (0, 2));
    assert_eq!(fx.sm.state_root(), fx.sm.root_with_phase(Phase::Settlement));
    assert_eq!((fx.sm.balance(), fx.sm.fees()), (b, f));
    fx.tick();
    fx.rejects(vec![fx.confirm_by(ghost, T0, &fx.hosts[1].clone())], |e| {
        *e == StateError::InferenceNotFound(ghost)
    });
    fx.rejects(vec![finalize()], |e| *e == StateError::AlreadyFinalizing);
}

#[test]
fn auto_seal_at_nonce_150() {
    let mut fx = Fx::new(&[0, 1, 2, 3]); // default config: grace 20 nonces / 3600 s, every 150
    let old = fx.finished(1, 1); // confirmed at T0 + 1
    let timed_out = fx.start(1, 1);
    let votes = (0..4)
        .filter(|s| *s != fx.sm.record(timed_out).unwrap().executor_slot)
        .map(|s| fx.timeout_vote(timed_out, TimeoutReason::Refused, s))
        .collect();
    fx.ok(vec![fx.timeout(timed_out, TimeoutReason::Refused, votes)]);
    let ghost = fx.start(1, 1);
    let recent = fx.start(1, 1);
    fx.ok(vec![fx.confirm(recent, T0 + 3_000)]);
    fx.ok(vec![fx.finish(recent, 1, 1)]);
    while fx.next() < 140 {
        fx.tick();
    }
    let late_terminal = fx.finished(1, 1); // validated below, but inside the nonce grace
    fx.ok(vec![fx.validation(
        late_terminal,
        (late_terminal as u32 + 1) % 4,
        false,
    )]);
    let clock = fx.start(1, 1);
    fx.ok(vec![fx.confirm(clock, T0 + 3_601)]);
    while fx.next() < 150 {
        fx.tick();
    }
    assert_eq!(fx.sm.sealed_count(), 0);
    assert_eq!(fx.sm.state_clock(), Some(T0 + 3_601));
    let expected = [old, timed_out].iter().fold([0u8; 32], |acc, id| {
        fold_sealed(&acc, 150, *id, &fx.sm.record(*id).unwrap().entry_bytes())
    });
    fx.tick(); // nonce 150
    assert_eq!(fx.sm.sealed_count(), 2);
    assert_eq!(fx.sm.sealed_acc(), expected);
    assert!(fx.sm.record(old).is_none() && fx.sm.record(timed_out).is_none());
    // Pending, Started, Challenged, too-recent Finished stay live.
    for id in [ghost, recent, late_terminal, clock] {
        assert!(fx.sm.record(id).is_some(), "{id} should stay live");
    }
    assert_eq!(
        fx.sm.record(recent).unwrap().status,
        InferenceStatus::Finished
    );
    // Not a seal nonce: nothing more happens at 151.
    fx.tick();
    assert_eq!(fx.sm.sealed_count(), 2);
}

#[test]
fn state_clock_scans_only_the_newest_3n_confirmed_records() {
    let mut fx = Fx::new(&[0, 1]); // window 6
    assert_eq!(fx.sm.state_clock(), None);
    let first = fx.start(1, 1);
    fx.ok(vec![fx.confirm(first, T0 + 500)]);
    assert_eq!(fx.sm.state_clock(), Some(T0 + 500));
    for _ in 0..5 {
        fx.start(1, 1);
    }
    // Still inside the window (6 records) but unconfirmed ones are skipped.
    assert_eq!(fx.sm.state_clock(), Some(T0 + 500));
    fx.start(1, 1);
    assert_eq!(
        fx.sm.state_clock(),
        None,
        "the only confirmed record left the window"
    );
}

#[test]
fn no_seal_without_a_known_clock() {
    let cfg = SessionConfig {
        auto_seal_every_n_nonces: 5,
        inference_seal_grace_nonces: 1,
        ..SessionConfig::default_for_group(3)
    };
    let mut fx = Fx::with_config(&[0, 1, 2], cfg);
    let id = fx.start(1, 1); // nonce 1, executor 1
    let votes = vec![
        fx.timeout_vote(id, TimeoutReason::Refused, 0),
        fx.timeout_vote(id, TimeoutReason::Refused, 2),
    ];
    fx.ok(vec![fx.timeout(id, TimeoutReason::Refused, votes)]);
    while fx.next() <= 5 {
        fx.tick();
    }
    assert_eq!(
        fx.sm.sealed_count(),
        0,
        "TimedOut never confirmed: clock unknown"
    );
    let c = fx.start(1, 1);
    fx.ok(vec![fx.confirm(c, T0)]);
    while fx.next() <= 10 {
        fx.tick();
    }
    assert_eq!(fx.sm.sealed_count(), 1);
    assert!(fx.sm.record(id).is_none());
}

#[test]
fn root_matches_an_independent_composition_of_a_fresh_state() {
    let fx = Fx::new(&[0, 1]);
    // HostStatsMapProto{[{slot 0}, {slot 1}]}: an all-zero entry is still written.
    let host_stats_hash = sha256(&[0x0a, 0x00, 0x0a, 0x02, 0x08, 0x01]);
    let inferences_hash = sha256(&[[0u8; 32], sha256(b"")].concat());
    let balance = AMOUNT - 10_000;
    let rest = sha256(&[&balance.to_be_bytes()[..], &inferences_hash, &sha256(b"")].concat());
    let root = sha256(
        &[
            &host_stats_hash[..],
            &10_000u64.to_be_bytes(),
            &rest,
            &sha256(b"v2"),
            &[0u8],
        ]
        .concat(),
    );
    assert_eq!(fx.sm.rest_hash(), rest);
    assert_eq!(fx.sm.state_root(), root);
}

#[test]
fn root_commits_to_every_part_of_the_state() {
    let mut fx = Fx::new(&[0, 1, 2]);
    let id = fx.finished(3, 4);
    let base = fx.sm.state_root();
    let changed = |f: &dyn Fn(&mut StateMachine)| {
        let mut sm = fx.sm.clone();
        f(&mut sm);
        sm.state_root()
    };
    let variants = [
        changed(&|sm| sm.st.balance += 1),
        changed(&|sm| sm.st.fees += 1),
        changed(&|sm| sm.st.phase = Phase::Finalizing),
        changed(&|sm| sm.st.host_stats[2].missed += 1),
        changed(&|sm| sm.st.host_stats[0].completed_validations += 1),
        changed(&|sm| sm.st.sealed_acc[0] ^= 1),
        changed(&|sm| sm.st.records.get_mut(&id).unwrap().output_tokens += 1),
        changed(&|sm| sm.st.records.get_mut(&id).unwrap().validated_by |= 1 << 100),
        changed(&|sm| {
            sm.st.records.remove(&id);
        }),
    ];
    for (i, v) in variants.iter().enumerate() {
        assert_ne!(*v, base, "variant {i} did not change the root");
    }
    // Bookkeeping outside the root does not change it.
    assert_eq!(changed(&|sm| sm.st.sealed_count += 1), base);
    assert_ne!(fx.sm.root_with_phase(Phase::Settlement), base);
}
