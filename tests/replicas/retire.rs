//! A retire request outlives its escrow's owner: the rotation's leader asks the owner of an
//! escrow to retire it (a record in `escrow_retire`, the interface between the two), but the
//! owner is frozen (`SIGSTOP`). The other replica leaves the request while it does not hold the
//! escrow, takes the escrow over once the frozen owner's lease expires, executes the request
//! (drain and settle, as a local retirement) and deletes it; the escrow is settled on chain.
//! The old owner, thawed, settles nothing.

use std::time::Duration;

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{EscrowStatus, Profile, SimConfig, SimNetwork};

use crate::cluster::{chat_detail, poll, Cluster};

const TTL: Duration = Duration::from_millis(2000);

#[actix_rt::test]
async fn a_retire_request_is_executed_by_whoever_holds_the_escrow() {
    let mut cfg = SimConfig::with_seed("replicas-retire");
    cfg.hosts = 4;
    cfg.profile = Profile::Fast;
    cfg.output_tokens = 4;
    cfg.escrow_ids = vec!["51".into(), "52".into()];
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let model = sim.config().model.clone();
    let mut cluster = Cluster::new("retire", 2, &sim, TTL).await;
    cluster.start(0, &sim).await;
    cluster.start(1, &sim).await;
    cluster.wait_spread(&[0, 1], 1, TTL * 5).await;
    let owners = cluster.owners().await;
    let escrow = owners
        .iter()
        .find(|(_, o)| **o == cluster.replicas[1].id)
        .map(|(e, _)| e.clone())
        .unwrap();
    for i in 0..4 {
        let r = chat_detail(&cluster.replicas[1].url, &format!("before {i}")).await;
        assert!(r.is_ok(), "{r:?}");
    }

    cluster.signal(1, "STOP");
    let request = serde_json::json!({"escrow_id": escrow, "model": model,
        "requested_by": "r0", "requested_at_ms": 0});
    cluster.put_record("escrow_retire", &escrow, &request).await;
    // The other replica takes the escrow over (lease expiry), executes the request and
    // deletes it; the escrow settles on chain.
    poll(TTL * 15, "the escrow settled on chain", || async {
        matches!(
            sim.escrow_status(&escrow),
            Some(EscrowStatus::Settled { .. })
        )
    })
    .await;
    poll(TTL * 3, "the request deleted", || async {
        !cluster.has_record("escrow_retire", &escrow).await
    })
    .await;
    assert!(cluster.logged_for(0, "escrow_retire_executed", &escrow));
    cluster.signal(1, "CONT");
    // The other escrow still serves, from either replica.
    for i in 0..4 {
        let url = &cluster.replicas[i % 2].url;
        let r = chat_detail(url, &format!("after {i}")).await;
        assert!(r.is_ok(), "{r:?}");
    }
    assert!(
        !cluster.logged_for(1, "settlement_confirmed", &escrow),
        "the frozen owner settled nothing"
    );
}
