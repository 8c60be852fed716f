//! Micro-benchmark of the devshard state machine with many live records. Prints timings, asserts
//! nothing about them:
//!
//! ```text
//! cargo test --release -p devshard-actors --test state_speed -- --ignored --nocapture
//! ```
//!
//! The session is restored from a snapshot with `n` live records (ids `1..=n`, 7 slots): the
//! first 150 are Validated (sealable), the rest Finished within the seal grace, except the newest
//! ones: `n` and `n-1` Pending, `n-3` and `n-5` Started. Every apply is measured on a fresh clone
//! of that state (the clone itself is timed separately).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::time::{Duration, Instant};

use devshard_actors::protocol::{
    crypto::{recover_address, SigningKey},
    diff::Diff,
    proto::{
        DevshardTx, MsgConfirmStart, MsgFinishInference, MsgStartInference, MsgValidation, Tx,
    },
    state::{
        finish_unsigned_bytes, sign_finish, sign_receipt, sign_validation, InferenceRecord,
        InferenceStatus, Phase, SessionConfig, Slot, StateMachine, StateSnapshot,
    },
};

const ESCROW: &str = "42";
const T0: i64 = 1_700_000_000;
const SLOTS: u32 = 7;
const MODEL: &str = "Qwen/Qwen2.5-7B-Instruct";

fn keys() -> Vec<SigningKey> {
    (0..SLOTS).map(|i| SigningKey::derive("host", i)).collect()
}

fn record(id: u64) -> InferenceRecord {
    InferenceRecord {
        inference_id: id,
        status: InferenceStatus::Finished,
        executor_slot: (id % u64::from(SLOTS)) as u32,
        model: MODEL.into(),
        prompt_hash: vec![(id % 251) as u8; 32].into(),
        response_hash: vec![(id % 241) as u8; 32].into(),
        input_length: 800 + id % 1000,
        max_tokens: 512,
        input_tokens: 200 + id % 300,
        output_tokens: 100 + id % 400,
        reserved_cost: 1312 + id % 1000,
        actual_cost: 300 + id % 700,
        started_at: T0 + (id / 10) as i64,
        confirmed_at: T0 + (id / 10) as i64 + 1,
        votes_valid: 0,
        votes_invalid: 0,
        validated_by: 0,
    }
}

/// A session with `n` live records whose next nonce is `n + 1 + extra`.
fn session(n: u64, extra: u64) -> StateMachine {
    let group = keys()
        .iter()
        .enumerate()
        .map(|(i, k)| Slot {
            slot_id: i as u32,
            validator: k.address().clone(),
        })
        .collect();
    let records = (1..=n)
        .map(|id| {
            let mut r = record(id);
            if id <= 150 {
                r.status = InferenceStatus::Validated;
                r.votes_valid = 4;
                r.validated_by = 0b1110;
            } else if id == n || id + 1 == n {
                r.status = InferenceStatus::Pending;
                r.response_hash = Default::default();
                (
                    r.input_tokens,
                    r.output_tokens,
                    r.actual_cost,
                    r.confirmed_at,
                ) = (0, 0, 0, 0);
            } else if id + 3 == n || id + 5 == n {
                r.status = InferenceStatus::Started;
                r.response_hash = Default::default();
                (r.input_tokens, r.output_tokens, r.actual_cost) = (0, 0, 0);
            }
            r
        })
        .collect();
    let snap = StateSnapshot {
        escrow_id: ESCROW.into(),
        config: SessionConfig::default_for_group(SLOTS as usize),
        group,
        balance: 1_000_000_000_000,
        fees: 10_000 + 1_000 * n,
        phase: Phase::Active,
        finalize_nonce: 0,
        latest_nonce: n + extra,
        sealed_acc: hex::encode([0u8; 32]),
        sealed_count: 0,
        records,
        host_stats: vec![Default::default(); SLOTS as usize],
        warm_keys: Default::default(),
    };
    StateMachine::from_snapshot(snap).unwrap()
}

fn confirm(sm: &StateMachine, id: u64) -> DevshardTx {
    let r = sm.record(id).unwrap();
    let start = MsgStartInference {
        inference_id: id,
        prompt_hash: r.prompt_hash.to_vec(),
        model: r.model.to_string(),
        input_length: r.input_length,
        max_tokens: r.max_tokens,
        started_at: r.started_at,
    };
    let confirmed_at = r.started_at + 1;
    let key = &keys()[r.executor_slot as usize];
    let executor_sig = sign_receipt(&start, ESCROW, confirmed_at, key).to_vec();
    DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
        inference_id: id,
        executor_sig,
        confirmed_at,
    }))
}

fn finish_msg(sm: &StateMachine, id: u64) -> MsgFinishInference {
    let slot = sm.record(id).unwrap().executor_slot;
    let m = MsgFinishInference {
        inference_id: id,
        response_hash: vec![9; 32],
        input_tokens: 300,
        output_tokens: 200,
        executor_slot: slot,
        proposer_sig: Vec::new(),
        escrow_id: ESCROW.into(),
    };
    sign_finish(m, &keys()[slot as usize])
}

/// A valid verdict on record `id` from the slot after its executor.
fn validation(sm: &StateMachine, id: u64) -> DevshardTx {
    let slot = (sm.record(id).unwrap().executor_slot + 1) % SLOTS;
    let m = MsgValidation {
        inference_id: id,
        validator_slot: slot,
        valid: true,
        proposer_sig: Vec::new(),
        escrow_id: ESCROW.into(),
    };
    DevshardTx::new(Tx::Validation(sign_validation(m, &keys()[slot as usize])))
}

fn start(nonce: u64) -> DevshardTx {
    DevshardTx::new(Tx::StartInference(MsgStartInference {
        inference_id: nonce,
        prompt_hash: vec![3; 32],
        model: MODEL.into(),
        input_length: 900,
        max_tokens: 512,
        started_at: T0 + 2_000,
    }))
}

/// Mean and minimum of `iters` runs of `f` (each run gets its own untimed setup).
fn time<S, T>(iters: u32, mut setup: impl FnMut() -> S, mut f: impl FnMut(S) -> T) -> String {
    let mut total = Duration::ZERO;
    let mut min = Duration::MAX;
    for _ in 0..iters {
        let s = setup();
        let t = Instant::now();
        let out = f(s);
        let dt = t.elapsed();
        drop(out);
        total += dt;
        min = min.min(dt);
    }
    let mean = total / iters;
    format!("mean {:>9.1} µs   min {:>9.1} µs", us(mean), us(min))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The root of a copy rebuilt from scratch (every record re-encoded and hashed).
fn rebuilt_root(sm: &StateMachine) -> [u8; 32] {
    StateMachine::from_snapshot(sm.snapshot())
        .unwrap()
        .state_root()
}

fn bench(n: u64) {
    let iters = if n > 10_000 { 60 } else { 200 };
    let creator = SigningKey::derive("creator", 0);
    let base = session(n, 0);
    let nonce = base.latest_nonce() + 1;
    assert_ne!(nonce % 150, 0, "the measured nonce must not auto-seal");
    let txs = vec![
        confirm(&base, n),
        DevshardTx::new(Tx::FinishInference(finish_msg(&base, n - 3))),
    ];
    let root_of = |txs: &[DevshardTx]| {
        let mut sm = base.clone();
        let be = sm.apply_best_effort(nonce, txs.to_vec()).unwrap();
        assert!(be.skipped.is_empty(), "{:?}", be.skipped);
        assert_eq!(be.root, rebuilt_root(&sm));
        be.root
    };
    let empty_diff = Diff::sign(nonce, vec![], ESCROW, root_of(&[]), &creator);
    let touch_diff = Diff::sign(nonce, txs.clone(), ESCROW, root_of(&txs), &creator);
    let sealing = session(n, 149 - n % 150);
    assert_eq!((sealing.latest_nonce() + 1) % 150, 0);

    println!("--- {n} live records ({iters} runs each) ---");
    let row = |name: &str, t: String| println!("{name:<44} {t}");
    row("clone", time(iters, || (), |()| base.clone()));
    row("state_root", time(iters, || (), |()| base.state_root()));
    row(
        "apply_best_effort: empty",
        time(
            iters,
            || base.clone(),
            |mut sm| sm.apply_best_effort(nonce, vec![]).unwrap(),
        ),
    );
    row(
        "apply_diff: empty (1 sig recovery)",
        time(
            iters,
            || base.clone(),
            |mut sm| sm.apply_diff(&empty_diff, creator.address()).unwrap(),
        ),
    );
    row(
        "apply_best_effort: start (append)",
        time(
            iters,
            || base.clone(),
            |mut sm| sm.apply_best_effort(nonce, vec![start(nonce)]).unwrap(),
        ),
    );
    row(
        "apply_best_effort: confirm+finish (2 recov.)",
        time(
            iters,
            || base.clone(),
            |mut sm| sm.apply_best_effort(nonce, txs.clone()).unwrap(),
        ),
    );
    row(
        "apply_diff: confirm+finish (3 recoveries)",
        time(
            iters,
            || base.clone(),
            |mut sm| sm.apply_diff(&touch_diff, creator.address()).unwrap(),
        ),
    );
    for back in [200, 2_000] {
        let v = vec![validation(&base, n - back)];
        let _ = root_of(&v);
        row(
            &format!("apply_best_effort: validation of id n-{back} (1)"),
            time(
                iters,
                || base.clone(),
                |mut sm| {
                    let be = sm.apply_best_effort(nonce, v.clone()).unwrap();
                    assert!(be.skipped.is_empty(), "{:?}", be.skipped);
                    be
                },
            ),
        );
    }
    let finish = finish_msg(&base, n - 3);
    let unsigned = finish_unsigned_bytes(&finish);
    row(
        "  reference: one signature recovery",
        time(
            iters,
            || (),
            |()| recover_address(&unsigned, &finish.proposer_sig).unwrap(),
        ),
    );
    row(
        "apply_best_effort: empty at a seal nonce",
        time(
            iters.min(40),
            || sealing.clone(),
            |mut sm| {
                let nonce = sm.latest_nonce() + 1;
                sm.apply_best_effort(nonce, vec![]).unwrap()
            },
        ),
    );
    let mut sealed = sealing.clone();
    let before = sealed.records().count();
    sealed
        .apply_best_effort(sealed.latest_nonce() + 1, vec![])
        .unwrap();
    assert_eq!(sealed.state_root(), rebuilt_root(&sealed));
    let _ = root_of(&[start(nonce)]);
    println!(
        "  (that seal removed {} records)",
        before - sealed.records().count()
    );
}

#[test]
#[ignore = "timing benchmark; run with --release -- --ignored --nocapture"]
fn state_machine_speed() {
    for n in [4_000, 20_000] {
        bench(n);
    }
}
