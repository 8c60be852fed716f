//! The incremental live-record set (`records.rs`) against a plain `BTreeMap` model and the
//! straightforward `sha256(proto(InferencesMapProto))`: random appends, inserts in gaps,
//! replacements, in-place edits, single and bulk removals, with and without refreshes, and
//! clones that must not see later writes (copy-on-write).

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::protocol::{
    crypto::sha256,
    proto::{self, InferencesMapProto},
    state::{records::Records, InferenceRecord, InferenceStatus},
};

/// The live hash exactly as the root used to compute it.
pub(super) fn reference_live_hash<'a>(
    records: impl Iterator<Item = &'a InferenceRecord>,
) -> [u8; 32] {
    let map = InferencesMapProto {
        entries: records.map(|r| r.to_proto()).collect(),
    };
    sha256(&proto::encode(&map))
}

fn rec(id: u64, seed: u64) -> InferenceRecord {
    let status = [
        InferenceStatus::Pending,
        InferenceStatus::Started,
        InferenceStatus::Finished,
        InferenceStatus::Validated,
        InferenceStatus::TimedOut,
    ][(seed % 5) as usize];
    InferenceRecord {
        inference_id: id,
        status,
        executor_slot: (id % 5) as u32,
        model: "m".repeat((seed % 40) as usize).into(),
        prompt_hash: vec![seed as u8; 32].into(),
        response_hash: vec![7; (seed % 3 * 16) as usize].into(),
        input_length: seed % 5_000,
        max_tokens: seed >> 3,
        input_tokens: seed % 7,
        output_tokens: seed % 300,
        reserved_cost: seed.wrapping_mul(31),
        actual_cost: seed % 2,
        started_at: seed as i64 - 5,
        confirmed_at: (seed % 3) as i64,
        votes_valid: (seed % 4) as u32,
        votes_invalid: 0,
        validated_by: u128::from(seed) << (seed % 64),
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Ids above every live id (with gaps so inserts in the middle are possible).
    Append {
        count: u8,
        gap: u8,
        seed: u64,
    },
    /// A new id somewhere below the last one.
    Insert {
        at: u64,
        seed: u64,
    },
    Replace {
        pick: usize,
        seed: u64,
    },
    Edit {
        pick: usize,
        tokens: u64,
    },
    Remove {
        pick: usize,
    },
    /// Every `stride`-th record from position `from` (like a seal), or from `from % 8` records
    /// before the end.
    RemoveMany {
        from: usize,
        stride: usize,
        tail: bool,
    },
    Refresh,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..24, 0u8..4, any::<u64>())
            .prop_map(|(count, gap, seed)| Op::Append { count, gap, seed }),
        2 => (any::<u64>(), any::<u64>()).prop_map(|(at, seed)| Op::Insert { at, seed }),
        3 => (any::<usize>(), any::<u64>()).prop_map(|(pick, seed)| Op::Replace { pick, seed }),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(pick, tokens)| Op::Edit { pick, tokens }),
        1 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
        2 => (any::<usize>(), 1usize..5, any::<bool>())
            .prop_map(|(from, stride, tail)| Op::RemoveMany { from, stride, tail }),
        2 => Just(Op::Refresh),
    ]
}

fn nth(model: &BTreeMap<u64, InferenceRecord>, pick: usize) -> Option<u64> {
    let n = model.len();
    (n > 0)
        .then(|| model.keys().nth(pick % n).copied())
        .flatten()
}

fn apply(op: &Op, live: &mut Records, model: &mut BTreeMap<u64, InferenceRecord>) {
    match *op {
        Op::Append { count, gap, seed } => {
            let mut id = model.keys().next_back().copied().unwrap_or(0);
            for k in 0..u64::from(count) {
                id += 1 + u64::from(gap);
                live.put(rec(id, seed ^ k));
                model.insert(id, rec(id, seed ^ k));
            }
        }
        Op::Insert { at, seed } => {
            let last = model.keys().next_back().copied().unwrap_or(0);
            let id = at % (last + 1);
            if let std::collections::btree_map::Entry::Vacant(v) = model.entry(id) {
                live.put(rec(id, seed));
                v.insert(rec(id, seed));
            }
        }
        Op::Replace { pick, seed } => {
            if let Some(id) = nth(model, pick) {
                live.put(rec(id, seed));
                model.insert(id, rec(id, seed));
            }
        }
        Op::Edit { pick, tokens } => {
            if let Some(id) = nth(model, pick) {
                live.get_mut(&id).unwrap().output_tokens = tokens;
                model.get_mut(&id).unwrap().output_tokens = tokens;
            }
        }
        Op::Remove { pick } => {
            if let Some(id) = nth(model, pick) {
                assert_eq!(live.remove(&id), model.remove(&id));
            }
        }
        Op::RemoveMany { from, stride, tail } => {
            let n = model.len().max(1);
            let from = if tail {
                n.saturating_sub(1 + from % 8)
            } else {
                from % n
            };
            let ids: Vec<u64> = model.keys().copied().skip(from).step_by(stride).collect();
            let removed: Vec<InferenceRecord> = live
                .remove_sorted(&ids)
                .iter()
                .map(|e| e.record().clone())
                .collect();
            let want: Vec<InferenceRecord> = ids.iter().filter_map(|id| model.remove(id)).collect();
            assert_eq!(removed, want);
        }
        Op::Refresh => live.refresh(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn incremental_live_hash_equals_the_full_recomputation(
        ops in prop::collection::vec(op(), 1..50),
    ) {
        let mut live = Records::default();
        let mut model = BTreeMap::new();
        prop_assert_eq!(live.live_hash(), reference_live_hash(model.values()));
        for op in &ops {
            let before = live.clone();
            let before_hash = reference_live_hash(model.values());
            apply(op, &mut live, &mut model);
            live.check_invariants();
            prop_assert!(live.iter().eq(model.values()), "contents differ after {:?}", op);
            let want = reference_live_hash(model.values());
            prop_assert_eq!(live.live_hash(), want, "dirty hash after {:?}", op);
            // The clone taken before the op saw none of it.
            before.check_invariants();
            prop_assert_eq!(before.live_hash(), before_hash);
            let mut refreshed = live.clone();
            refreshed.refresh();
            refreshed.check_invariants();
            prop_assert_eq!(refreshed.live_hash(), want);
            prop_assert_eq!(&refreshed, &live);
            prop_assert_eq!(Records::from_sorted(model.values().cloned()), live.clone());
        }
    }
}

#[test]
fn empty_set_hashes_the_empty_string_and_splits_keep_order() {
    let mut live = Records::default();
    assert_eq!(live.live_hash(), sha256(b""));
    // Many inserts into one gap overflow a chunk and split it.
    live.put(rec(0, 1));
    live.put(rec(1_000, 2));
    live.refresh();
    for id in 1..300 {
        live.put(rec(id * 3, id));
        if id % 50 == 0 {
            live.refresh();
        }
        live.check_invariants();
    }
    assert_eq!(live.live_hash(), reference_live_hash(live.iter()));
    live.refresh();
    live.check_invariants();
    assert_eq!(live.live_hash(), reference_live_hash(live.iter()));
}
