//! Every diff the escrow composes moves its durable nonce once it is durable, whoever waits for
//! it (`actor/granting.rs` `durable_then_ready`). Finding (CI's chaos run, seed 12 with
//! rotation, and the commit seed's final settlement): the checker's admin sync composed a diff
//! that sequenced a queued finish; that diff's ack went only to the sync's sends, so the durable
//! nonce stayed below it and the finish never left the nonce book. No later diff came (the
//! escrow was draining), and the settlement stayed `draining` for good (invariant 7).

use std::time::Duration;

use devshard_actors::escrow::{
    messages::{BeginDrain, SyncHosts},
    EscrowConfig,
};

use super::{harness::Harness, timeout_votes::sim};

#[actix_rt::test]
async fn ci_seed_12_a_finish_sequenced_by_a_sync_diff_leaves_the_book_and_the_drain_ends() {
    tokio::time::pause();
    // The finish's own diff is 10 minutes away: only the sync's diff can take it.
    let escrow_cfg = EscrowConfig {
        finish_poll_initial_ms: 600_000,
        ..EscrowConfig::default()
    };
    let h = Harness::start_escrow(sim("finish-in-a-sync-diff"), escrow_cfg).await;
    let a = h
        .chat(Harness::body("answered, its finish queued", false))
        .await;
    assert!(a.is_success(), "{a:?}");
    let before = h.snapshot("42").await;
    assert_eq!(
        before.unsettled, 1,
        "the finish waits for a diff: {before:?}"
    );
    let escrow = h.escrow_addr("42").await;
    escrow.send(SyncHosts).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = h.snapshot("42").await;
    assert_eq!(after.nonce, before.nonce + 1, "the sync sequenced it");
    assert_eq!(after.durable_nonce, after.nonce, "{after:?}");
    let progress = escrow.send(BeginDrain).await.unwrap();
    assert_eq!(
        (progress.waiting, progress.unsettled),
        (0, 0),
        "drained: {progress:?}"
    );
}
