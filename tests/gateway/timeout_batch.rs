//! Confirmed timeouts share diffs (`escrow.timeout_tx_batch_ms`), in paused time over real
//! loopback HTTP. Found by the rotating hour-long chaos run J (seed `long-1`, 1 729 s): 2 300
//! execution timeouts confirmed at about 100 a second, each in a diff of its own that every host
//! applied and verified, while the edge admitted 45 requests a second and invariant 3's probe
//! waited past its 2 s.

use std::time::Duration;

use devshard_actors::escrow::EscrowConfig;

use super::{
    harness::Harness,
    timeout_votes::{all_confirmed, dead_executor_backlog, sim},
};

/// Refusal timeout + the default `timeout_buffer_ms`.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(60 + 5);

/// A dead executor leaves its nonces open; their refused timeouts confirm after the deadline.
/// Returns the timeouts confirmed, the nonces the escrow used meanwhile (no requests ran) and
/// the txs that diffs of their own sequenced after the batch wait.
async fn confirm_backlog(batch_ms: u64) -> (u64, u64, f64) {
    let escrow_cfg = EscrowConfig {
        timeout_tx_batch_ms: batch_ms,
        ..EscrowConfig::default()
    };
    let h = Harness::start_escrow(sim("timeout-batch"), escrow_cfg).await;
    let (open, _, start) = dead_executor_backlog(&h).await;
    let before = h.snapshot("42").await.nonce;
    tokio::time::sleep(REFUSAL_DEADLINE.saturating_sub(start.elapsed())).await;
    all_confirmed(&h, open, Duration::from_secs(900)).await;
    // Past the batch wait: the last batch is sequenced.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snap = h.snapshot("42").await;
    assert!(snap.pending_timeouts.is_empty());
    let batched = h.metrics.timeout_txs_batched.get_sample_sum();
    let used = snap.nonce - before;
    eprintln!("timeout_tx_batch_ms {batch_ms}: {open} timeouts confirmed in {used} nonces");
    (open, used, batched)
}

#[actix_rt::test]
async fn run_j_1729_s_a_backlog_of_confirmed_timeouts_shares_its_diffs() {
    tokio::time::pause();
    // Before: every confirmed timeout took a nonce of its own (what `timeout_tx_batch_ms = 0`
    // still does).
    let (open, used, _) = confirm_backlog(0).await;
    assert!(used >= open, "{open} timeouts in {used} nonces");
    // Now: the votes that confirm together share one diff (8 collect at once).
    let (open, used, batched) = confirm_backlog(50).await;
    assert_eq!(
        batched, open as f64,
        "every timeout sequenced after its batch wait"
    );
    assert!(
        used * 4 <= open,
        "{open} timeouts in {used} nonces: at most a quarter"
    );
}
