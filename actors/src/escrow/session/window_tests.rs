//! The diff window on a real session: what stays in memory, what is asked of the store, and how
//! an answer at a nonce below the window is still verified.

use std::sync::Arc;

use super::*;
use crate::{
    escrow::{
        info::{EscrowInfo, HostEndpoint},
        session::{SessionError, StartParams},
    },
    protocol::{
        crypto::{Address, SigningKey},
        state::{SessionConfig, Slot},
        wire::ReceiptBody,
    },
};

fn session(window: usize) -> (Session, SigningKey, Address) {
    let creator = SigningKey::from_bytes(&[3u8; 32]).unwrap();
    let host = SigningKey::from_bytes(&[4u8; 32]).unwrap();
    let info = Arc::new(EscrowInfo {
        escrow_id: "42".into(),
        creator: creator.address().clone(),
        model: "m".into(),
        amount: 10_000_000,
        config: SessionConfig::default_for_group(1),
        group: vec![Slot {
            slot_id: 0,
            validator: host.address().clone(),
        }],
        hosts: vec![HostEndpoint {
            address: host.address().clone(),
            base_url: "http://h0".into(),
            slots: vec![0],
            weight: 1,
        }],
        max_nonce: 20_000,
        route_prefix: "/v1/devshard".into(),
    });
    let s = Session::new(info).unwrap().with_diff_window(window);
    (s, creator, host.address().clone())
}

fn answer_at(nonce: u64, root: &[u8]) -> ReceiptBody {
    ReceiptBody {
        nonce,
        state_hash: Some(root.to_vec()),
        ..ReceiptBody::default()
    }
}

#[test]
fn only_the_newest_diffs_stay_in_memory_and_older_ones_are_asked_of_the_store() {
    let (mut s, key, host) = session(8);
    let diffs: Vec<_> = (0..20)
        .map(|_| s.compose(Vec::new(), &key).unwrap())
        .collect();
    assert_eq!(s.held_diffs(), 8);
    assert_eq!(s.first_held(), 13);
    assert!(
        s.held_after(0, u64::MAX, usize::MAX).is_none(),
        "below the window"
    );
    let held = s.held_after(12, u64::MAX, usize::MAX).unwrap();
    assert_eq!(
        held.iter().map(|d| d.nonce).collect::<Vec<_>>(),
        (13..=20).collect::<Vec<_>>()
    );
    assert_eq!(
        s.held_after(20, u64::MAX, 5).unwrap().len(),
        0,
        "nothing above our nonce"
    );
    // An answer at nonce 5 cannot be checked until its root is read back from the store…
    let root5 = diffs[4].post_state_root.clone();
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(5, &root5)),
        Err(SessionError::BeyondWindow { nonce: 5 })
    );
    assert_eq!(s.host_sync(&host), 0, "an unchecked answer moves nothing");
    // …then it is verified like any other: the right root is taken, a wrong one is a divergence.
    s.recall_roots(&diffs[..12]);
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(5, &root5)),
        Ok(())
    );
    assert_eq!(s.host_sync(&host), 5);
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(6, &[9u8; 32])),
        Err(SessionError::StateHashMismatch { nonce: 6 })
    );
    // Roots every host acknowledged past are forgotten as the window moves on.
    s.compose(Vec::new(), &key).unwrap();
    assert_eq!(s.expected_root(5), None);
    assert_eq!(s.expected_root(6), Some(diffs[5].post_state_root.clone()));
}

#[test]
fn a_start_below_the_window_is_rebuilt_from_its_inference_record() {
    let (mut s, key, _) = session(4);
    let params = StartParams {
        prompt_hash: [7u8; 32],
        model: "m".into(),
        input_length: 10,
        max_tokens: 20,
        started_at: 1_700_000_000,
    };
    let first = s.compose_start(&params, &key).unwrap();
    let sequenced = s.start_of(first.nonce).unwrap();
    for _ in 0..10 {
        s.compose(Vec::new(), &key).unwrap();
    }
    assert!(s.diff(first.nonce).is_none(), "its diff left the window");
    assert_eq!(s.start_of(first.nonce), Some(sequenced));
    assert_eq!(s.start_of(2), None, "a nonce that started nothing");
    let open: Vec<u64> = s.unsettled_entries(0).iter().map(|e| e.nonce).collect();
    assert_eq!(open, vec![first.nonce], "still settled after a restart");
}
