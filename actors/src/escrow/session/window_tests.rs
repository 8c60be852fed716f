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
    session_funded(window, 10_000_000)
}

fn session_funded(window: usize, amount: u64) -> (Session, SigningKey, Address) {
    let creator = SigningKey::from_bytes(&[3u8; 32]).unwrap();
    let host = SigningKey::from_bytes(&[4u8; 32]).unwrap();
    let info = Arc::new(EscrowInfo {
        escrow_id: "42".into(),
        creator: creator.address().clone(),
        model: "m".into(),
        amount,
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
        max_nonce: 40_000,
        route_prefix: "/v1/devshard".into(),
    });
    let s = Session::new(info).unwrap().with_diff_window(window);
    (s, creator, host.address().clone())
}

/// The start of one small inference.
fn start_params() -> StartParams {
    StartParams {
        prompt_hash: [7u8; 32],
        model: "m".into(),
        input_length: 10,
        max_tokens: 20,
        started_at: 1_700_000_000,
    }
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
    let diffs: Vec<_> = (0..300)
        .map(|_| s.compose(Vec::new(), &key).unwrap())
        .collect();
    let root = |n: usize| diffs[n - 1].post_state_root.clone();
    assert_eq!(s.held_diffs(), 8);
    assert_eq!(s.first_held(), 293);
    assert!(
        s.held_after(0, u64::MAX, usize::MAX).is_none(),
        "below the window"
    );
    let held = s.held_after(292, u64::MAX, usize::MAX).unwrap();
    let nonces: Vec<u64> = held.iter().map(|d| d.nonce).collect();
    assert_eq!(nonces, (293..=300).collect::<Vec<_>>());
    assert!(
        s.held_after(300, u64::MAX, 5).unwrap().is_empty(),
        "nothing above our nonce"
    );
    // Nobody acknowledged anything yet: the roots of the diffs that left memory are kept apart.
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(5, &root(5))),
        Ok(())
    );
    // Once the host acknowledged 299, only the newest LATE_ROOTS roots below it stay…
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(299, &root(299))),
        Ok(())
    );
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(6, &root(6))),
        Err(SessionError::BeyondWindow { nonce: 6 })
    );
    assert_eq!(s.host_sync(&host), 299, "an unchecked answer moves nothing");
    // …until they are read back from the store: then checked like any other.
    s.recall_roots(&diffs[..12]);
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(6, &root(6))),
        Ok(())
    );
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(7, &[9u8; 32])),
        Err(SessionError::StateHashMismatch { nonce: 7 })
    );
}

#[test]
fn an_idle_compaction_keeps_the_newest_diffs_and_the_roots_of_the_others() {
    let (mut s, key, host) = session(256);
    let diffs: Vec<_> = (0..40)
        .map(|_| s.compose(Vec::new(), &key).unwrap())
        .collect();
    assert_eq!(s.held_diffs(), 40, "no host acknowledged anything yet");
    s.compact_window(2);
    assert_eq!((s.held_diffs(), s.first_held()), (2, 39));
    assert!(s.held_after(20, 40, usize::MAX).is_none(), "the store");
    // An answer at a nonce that left memory is still checked against its root.
    let root = |n: usize| diffs[n - 1].post_state_root.clone();
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(21, &root(21))),
        Ok(())
    );
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(22, &root(21))),
        Err(SessionError::StateHashMismatch { nonce: 22 })
    );
    // The window refills with the next diffs, up to its own size again.
    for _ in 0..10 {
        s.compose(Vec::new(), &key).unwrap();
    }
    assert_eq!(s.held_diffs(), 12);
    assert_eq!(s.diff_window(), 256);
}

#[test]
fn diffs_every_host_acknowledged_leave_memory() {
    let (mut s, key, host) = session(256);
    let diffs: Vec<_> = (0..20)
        .map(|_| s.compose(Vec::new(), &key).unwrap())
        .collect();
    assert_eq!(s.held_diffs(), 20, "no host acknowledged anything yet");
    let root = diffs[16].post_state_root.clone();
    s.process_receipt(&host, None, &answer_at(17, &root))
        .unwrap();
    assert_eq!(s.first_held(), 17, "the lowest sync point's own diff stays");
    assert_eq!(s.held_diffs(), 4);
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(17, &root)),
        Ok(())
    );
    assert!(
        s.held_after(10, u64::MAX, usize::MAX).is_none(),
        "older ones: the store"
    );
    // A late answer at an older nonce is still checked, against the root kept apart.
    let late = diffs[9].post_state_root.clone();
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(10, &late)),
        Ok(())
    );
    assert_eq!(
        s.process_receipt(&host, None, &answer_at(11, &late)),
        Err(SessionError::StateHashMismatch { nonce: 11 })
    );
    assert_eq!(
        s.host_sync(&host),
        17,
        "a late answer never moves the sync point back"
    );
}

#[test]
fn a_start_below_the_window_is_rebuilt_from_its_inference_record() {
    let (mut s, key, _) = session(4);
    let params = start_params();
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

/// The session a restart rebuilds from a checkpoint and the diffs after it is the session the
/// whole log rebuilds (`checkpoint.rs`): same nonce, root, open inferences; a checkpoint that
/// does not match the log (ahead of it, another root) is not used.
#[test]
fn a_checkpoint_and_the_diffs_after_it_restore_the_session_the_whole_log_restores() {
    use crate::escrow::session::checkpoint::Checkpoint;
    let (mut s, key, _) = session(8);
    let start = |n: u64| StartParams {
        prompt_hash: [n as u8; 32],
        model: "m".into(),
        input_length: 10,
        max_tokens: 20,
        started_at: 1_700_000_000,
    };
    let mut log = Vec::new();
    for n in 0..40u64 {
        let d = if n % 3 == 0 {
            s.compose_start(&start(n), &key).unwrap()
        } else {
            s.compose(Vec::new(), &key).unwrap()
        };
        log.push((*d).clone());
        if n == 24 {
            let cp = s.checkpoint();
            assert_eq!(cp.nonce, 25);
            let json = serde_json::to_value(&cp).unwrap();
            let back: Checkpoint = serde_json::from_value(json).unwrap();
            let info = s.info().clone();
            let whole = Session::restore(info.clone(), log.clone(), &Default::default()).unwrap();
            let tail = log[24..].to_vec();
            let from_cp = Session::restore_from_checkpoint(info, back, tail, &Default::default())
                .unwrap()
                .expect("the checkpoint matches the log");
            assert_eq!(from_cp.nonce(), whole.nonce());
            assert_eq!(from_cp.state().state_root(), whole.state().state_root());
        }
    }
    let info = s.info().clone();
    let cp: Checkpoint = serde_json::from_value(serde_json::to_value(s.checkpoint()).unwrap())
        .unwrap_or_else(|_| unreachable!());
    let whole = Session::restore(info.clone(), log.clone(), &Default::default()).unwrap();
    // The log continues past the checkpoint: the tail replays on top of it.
    let early = {
        let mut e = whole.clone();
        e.sm = crate::protocol::state::StateMachine::from_snapshot(
            Session::restore(info.clone(), log[..30].to_vec(), &Default::default())
                .unwrap()
                .state()
                .snapshot(),
        )
        .unwrap();
        e.checkpoint()
    };
    let restored = Session::restore_from_checkpoint(
        info.clone(),
        early.clone(),
        log[29..].to_vec(),
        &Default::default(),
    )
    .unwrap()
    .expect("matches");
    assert_eq!(restored.nonce(), 40);
    assert_eq!(restored.state().state_root(), whole.state().state_root());
    let open = |s: &Session| {
        s.unsettled_entries(0)
            .into_iter()
            .map(|e| e.nonce)
            .collect::<Vec<_>>()
    };
    assert_eq!(open(&restored), open(&whole));
    assert!(!open(&whole).is_empty(), "the starts are open inferences");
    // Ahead of the log (the log ends before it) or over another root: not used.
    assert!(Session::restore_from_checkpoint(
        info.clone(),
        cp,
        log[..20].to_vec(),
        &Default::default()
    )
    .unwrap()
    .is_none());
    let mut wrong = early;
    wrong.root = hex::encode([9u8; 32]);
    assert!(
        Session::restore_from_checkpoint(info, wrong, log[29..].to_vec(), &Default::default())
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_host_that_applied_carried_diffs_is_acknowledged_there_never_back_nor_beyond_our_nonce() {
    let (mut s, key, host) = session(8);
    for _ in 0..20 {
        s.compose(Vec::new(), &key).unwrap();
    }
    assert_eq!(s.catch_up_after(&host), 0);
    s.acknowledged(&host, 15);
    assert_eq!(s.catch_up_after(&host), 15, "the next vote carries 16..");
    s.acknowledged(&host, 9);
    assert_eq!(s.host_sync(&host), 15, "never back");
    s.acknowledged(&host, 99);
    assert_eq!(s.host_sync(&host), 20, "never beyond our nonce");
}

#[test]
fn hour_long_run_a_root_read_back_for_one_report_is_kept_when_the_recalled_roots_are_full() {
    let (mut s, key, host) = session_funded(8, 1_000_000_000_000);
    let n = RECALLED_ROOTS + 200;
    let diffs: Vec<_> = (0..n)
        .map(|_| s.compose(Vec::new(), &key).unwrap())
        .collect();
    // Another catch-up read back every diff but the first 100: the recalled roots are full.
    s.recall_roots(&diffs[100..n - 8]);
    s.recall_roots(&diffs[4..5]);
    assert!(
        !s.knows_root(5),
        "a recalled root older than all the others goes at once"
    );
    s.recall_one(&diffs[4]);
    assert!(s.knows_root(5));
    let root = diffs[4].post_state_root.clone();
    assert_eq!(s.process_receipt(&host, None, &answer_at(5, &root)), Ok(()));
}

/// CI's 10⁴ property schedules on `ed800b2` (schedule 6199, invariant 4): a confirmed timeout
/// that no longer applied when its diff was composed was dropped, and its inference stayed open
/// for good. A skipped timeout of an open inference now comes back as an entry to settle, once.
#[test]
fn ci_ed800b2_a_confirmed_timeout_that_no_longer_applies_is_settled_again() {
    use crate::protocol::proto::{DevshardTx, MsgTimeoutInference, TimeoutReason, Tx};
    let (mut s, key, _) = session(8);
    let params = start_params();
    let open = s.compose_start(&params, &key).unwrap().nonce;
    let timeout = |id: u64| {
        DevshardTx::new(Tx::TimeoutInference(MsgTimeoutInference {
            inference_id: id,
            reason: TimeoutReason::Execution as i32,
            votes: Vec::new(),
        }))
    };
    // An execution timeout of a Pending record, without votes: the state skips it.
    s.queue(timeout(open));
    s.queue(timeout(open + 100));
    s.compose(Vec::new(), &key).unwrap();
    let lost: Vec<u64> = s.take_lost_timeouts(5).iter().map(|e| e.nonce).collect();
    assert_eq!(
        lost,
        [open],
        "the open inference only; nonce {} has none",
        open + 100
    );
    assert!(s.take_lost_timeouts(6).is_empty(), "taken once");
}
