//! Split brain: a replica frozen (`SIGSTOP`) past its lease TTL while it owns an escrow; the other
//! replica takes the escrow over and serves it; the frozen one resumes (`SIGCONT`) believing it
//! still owns the escrow. It must append nothing (every host holds one chain of diffs, the stored
//! one), stop the escrow, and log stage `lease_lost`.

use std::time::Duration;

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{Profile, SimConfig, SimNetwork};

use crate::{
    child::chat,
    cluster::{poll, Cluster},
};

const TTL: Duration = Duration::from_millis(2000);

#[actix_rt::test]
async fn a_frozen_owner_appends_nothing_after_its_lease_is_taken() {
    let mut cfg = SimConfig::with_seed("replicas-split-brain");
    cfg.hosts = 4;
    cfg.profile = Profile::Default;
    cfg.output_tokens = 8;
    cfg.escrow_ids = vec!["21".into(), "22".into()];
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let mut cluster = Cluster::new("splitbrain", 2, &sim, TTL).await;
    cluster.start(0, &sim).await;
    cluster.start(1, &sim).await;
    cluster.wait_spread(&[0, 1], 1, TTL * 5).await;
    let (old, new) = (0, 1);
    let frozen_escrow = cluster
        .owners()
        .await
        .into_iter()
        .find(|(_, o)| *o == cluster.replicas[old].id)
        .map(|(e, _)| e)
        .unwrap();
    let old_url = cluster.replicas[old].url.clone();
    for i in 0..4 {
        let r = chat(&old_url, &format!("before the freeze {i}"), true).await;
        assert!(r.is_ok(), "the owner serves before the freeze: {r:?}");
    }

    cluster.signal(old, "STOP");
    // The other replica takes both escrows once the frozen one's lease expires, and serves.
    cluster.wait_spread(&[new], 2, TTL * 3).await;
    let new_url = cluster.replicas[new].url.clone();
    for i in 0..6 {
        let r = chat(&new_url, &format!("after the takeover {i}"), true).await;
        assert!(r.is_ok(), "the new owner serves: {r:?}");
    }
    let log_before = cluster.stored_log(&frozen_escrow).await;

    // The old owner wakes up. Requests sent to it must not append under its stale epoch.
    cluster.signal(old, "CONT");
    poll(TTL * 3, "the old owner logs lease_lost", || {
        let url = old_url.clone();
        let lost = cluster.logged(old, "lease_lost");
        async move {
            if !lost {
                // Its answer does not matter: a 503 if it still ran the escrow, else another.
                let _ = chat(&url, "after the thaw", true).await;
            }
            lost
        }
    })
    .await;
    // Nothing of the old owner landed: the stored log only grew by the new owner's diffs, and
    // every host's chain is the stored one.
    let log_after = cluster.stored_log(&frozen_escrow).await;
    assert_eq!(&log_after[..log_before.len()], &log_before[..]);
    cluster.check_lockstep(&sim).await;
    // The cluster settles again: one escrow each.
    cluster.wait_spread(&[0, 1], 1, TTL * 5).await;
    cluster.check_lockstep(&sim).await;
}
