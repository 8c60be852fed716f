//! Upstream's own known-answer roots (`data/upstream-v41-script.json`, see `data/README.md`):
//! the 34-diff script of devshard release v4.1 replayed through our state machine, matching all
//! 35 `roots_v41` with the tag `"v4.1"` and all 35 `roots_v2` with the tag `"v2"`, both on the
//! host side (strict `apply_diff` of diffs signed by the user key, checking `post_state_root`)
//! and on the gateway side (best-effort composition, every tx applied), plus the end state.

// Test helpers outside `#[test]` fns are not covered by clippy's allow-*-in-tests settings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use devshard_actors::protocol::{
    crypto::{Address, SigningKey},
    diff::Diff,
    proto::DevshardTx,
    state::{Phase, SessionConfig, Slot, StateMachine},
    version::ProtocolVersion,
};
use prost::Message;
use serde_json::Value;

const SCRIPT: &str = include_str!("data/upstream-v41-script.json");

fn script() -> Value {
    serde_json::from_str(SCRIPT).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

fn config(s: &Value, protocol: ProtocolVersion) -> SessionConfig {
    let c = &s["config"];
    let n = |k: &str| u(&c[k]);
    SessionConfig {
        refusal_timeout: n("refusal_timeout") as i64,
        execution_timeout: n("execution_timeout") as i64,
        token_price: n("token_price"),
        create_devshard_fee: n("create_devshard_fee"),
        fee_per_nonce: n("fee_per_nonce"),
        vote_threshold: n("vote_threshold") as u32,
        validation_rate: n("validation_rate") as u32,
        inference_seal_grace_nonces: n("inference_seal_grace_nonces") as u32,
        inference_seal_grace_seconds: n("inference_seal_grace_seconds") as u32,
        auto_seal_every_n_nonces: n("auto_seal_every_n_nonces") as u32,
        protocol,
    }
}

fn group(s: &Value) -> Vec<Slot> {
    let hosts = s["keys_hex"]["hosts_slot_0_to_4"].as_array().unwrap();
    s["group"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let slot_id = u(&g["slot_id"]) as u32;
            let validator = Address::parse(g["validator_address"].as_str().unwrap()).unwrap();
            let key = SigningKey::from_hex(hosts[slot_id as usize].as_str().unwrap()).unwrap();
            assert_eq!(key.address(), &validator, "slot {slot_id} key and address");
            Slot { slot_id, validator }
        })
        .collect()
}

fn user(s: &Value) -> SigningKey {
    let key = SigningKey::from_hex(s["keys_hex"]["user"].as_str().unwrap()).unwrap();
    assert_eq!(key.address().as_str(), s["user_address"].as_str().unwrap());
    key
}

fn fresh(s: &Value, protocol: ProtocolVersion) -> StateMachine {
    StateMachine::new(
        s["escrow_id"].as_str().unwrap(),
        config(s, protocol),
        group(s),
        u(&s["balance"]),
    )
    .unwrap()
}

/// The txs of every step, decoded from upstream's `DevshardTx` bytes.
fn steps(s: &Value) -> Vec<(u64, Vec<DevshardTx>)> {
    s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            let txs = step["txs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    let bytes = hex::decode(t["devshard_tx_proto_hex"].as_str().unwrap()).unwrap();
                    DevshardTx::decode(bytes.as_slice()).unwrap()
                })
                .collect();
            (u(&step["nonce"]), txs)
        })
        .collect()
}

fn roots(s: &Value, key: &str) -> Vec<String> {
    s[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// Host side: every diff signed by the user and applied strictly, its `post_state_root` the
/// published root. Returns the end state.
fn replay_strict(s: &Value, protocol: ProtocolVersion, expected: &[String]) -> StateMachine {
    let user = user(s);
    let escrow = s["escrow_id"].as_str().unwrap();
    let mut sm = fresh(s, protocol);
    assert_eq!(
        hex::encode(sm.state_root()),
        expected[0],
        "root before any diff"
    );
    for (nonce, txs) in steps(s) {
        let want: [u8; 32] = hex::decode(&expected[nonce as usize])
            .unwrap()
            .try_into()
            .unwrap();
        let diff = Diff::sign(nonce, txs, escrow, want, &user);
        if let Err(e) = sm.apply_diff(&diff, user.address()) {
            panic!("{protocol}: nonce {nonce} rejected: {e}");
        }
        assert_eq!(
            sm.state_root(),
            want,
            "{protocol}: root after nonce {nonce}"
        );
    }
    sm
}

/// Gateway side: best-effort composition applies every tx and yields every published root.
fn replay_best_effort(s: &Value, protocol: ProtocolVersion, expected: &[String]) {
    let mut sm = fresh(s, protocol);
    let mut got = vec![hex::encode(sm.state_root())];
    for (nonce, txs) in steps(s) {
        let n = txs.len();
        let out = sm.apply_best_effort(nonce, txs).unwrap();
        assert!(out.skipped.is_empty(), "nonce {nonce}: {:?}", out.skipped);
        assert_eq!(out.applied.len(), n);
        got.push(hex::encode(out.root));
    }
    assert_eq!(got, expected, "{protocol}: best-effort roots");
}

fn check_end_state(s: &Value, sm: &StateMachine) {
    let end = &s["end_state"];
    assert_eq!(sm.balance(), u(&end["balance"]));
    assert_eq!(sm.fees(), u(&end["fees"]));
    assert_eq!(sm.phase(), Phase::Settlement);
    assert_eq!(sm.latest_nonce(), 34);
    for slot in 0..5u32 {
        let want = &end["host_stats"][slot.to_string()];
        let field = |k: &str| want.get(k).map_or(0, u);
        let got = sm.host_stats(slot);
        assert_eq!(u64::from(got.missed), field("missed"), "slot {slot} missed");
        assert_eq!(
            u64::from(got.invalid),
            field("invalid"),
            "slot {slot} invalid"
        );
        assert_eq!(got.cost, field("cost"), "slot {slot} cost");
        assert_eq!(
            (got.completed_validations, got.required_validations),
            (0, 0),
            "slot {slot}: validations never touch host_stats"
        );
    }
}

#[test]
fn upstream_v41_script_matches_all_35_published_roots_with_tag_v4_1() {
    let s = script();
    let expected = roots(&s, "roots_v41");
    assert_eq!(expected.len(), 35);
    let sm = replay_strict(&s, ProtocolVersion::V4_1, &expected);
    check_end_state(&s, &sm);
    replay_best_effort(&s, ProtocolVersion::V4_1, &expected);
}

#[test]
fn upstream_v41_script_matches_all_35_v2_roots_with_tag_v2() {
    let s = script();
    let expected = roots(&s, "roots_v2");
    assert_eq!(expected.len(), 35);
    let sm = replay_strict(&s, ProtocolVersion::V2, &expected);
    check_end_state(&s, &sm);
    replay_best_effort(&s, ProtocolVersion::V2, &expected);
}

#[test]
fn the_two_tags_give_different_roots_at_every_nonce() {
    let s = script();
    let (a, b) = (roots(&s, "roots_v41"), roots(&s, "roots_v2"));
    assert!(a.iter().zip(&b).all(|(x, y)| x != y));
}
