//! Three replicas, six escrows (two each once spread), 100 concurrent streams spread over the
//! replicas; `kill -9` one replica: its escrows resume on the others within the lease TTL (plus
//! a margin for a loaded machine), the clients of the killed replica may fail and those of the
//! others never do, no nonce is lost or reused and every host agrees with the new owner. The
//! killed replica restarts and the escrows spread back to two each by graceful handoff, under
//! load on the two others, whose clients again see no error. Ten cycles.

use std::time::Duration;

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{Profile, SimConfig, SimNetwork};
use tokio::time::Instant;

use crate::{
    child::{chat_counted, Progress},
    cluster::{chat_detail, poll, Cluster},
};

const TTL: Duration = Duration::from_millis(2000);
const CYCLES: usize = 10;
const STREAMS: usize = 100;
/// Slack over the TTL for the takeover (the claiming round, spawning, a loaded machine).
const TAKEOVER_MARGIN: Duration = Duration::from_millis(2500);

fn sim_config() -> SimConfig {
    let mut cfg = SimConfig::with_seed("replicas-failover");
    cfg.hosts = 4;
    cfg.profile = Profile::Default;
    cfg.output_tokens = 8;
    cfg.escrow_ids = (11..=16).map(|n| n.to_string()).collect();
    cfg
}

/// `n` streams spread round-robin over `urls`; the results with the index of the URL each used.
async fn load(urls: Vec<String>, n: usize, tag: String, progress: Progress) -> Vec<(usize, bool)> {
    let count = urls.len();
    let requests = (0..n).map(|i| {
        let (url, p, tag) = (urls[i % count].clone(), progress.clone(), tag.clone());
        async move {
            let r = chat_counted(&url, &format!("{tag} {i}"), p).await;
            (i % count, r.is_ok())
        }
    });
    futures::future::join_all(requests).await
}

#[actix_rt::test]
async fn killed_replicas_escrows_resume_elsewhere_without_losing_a_nonce() {
    let sim = SimNetwork::start(sim_config(), TokioClock::new().shared())
        .await
        .unwrap();
    let mut cluster = Cluster::new("failover", 3, &sim, TTL).await;
    for i in 0..3 {
        cluster.start(i, &sim).await;
    }
    let spread = cluster.wait_spread(&[0, 1, 2], 2, TTL * 5).await;
    eprintln!("initial spread in {spread:?}");
    let test_started = Instant::now();
    let mut worst_takeover = Duration::ZERO;
    for cycle in 0..CYCLES {
        let victim = cycle % 3;
        let survivors: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
        let urls: Vec<String> = cluster.replicas.iter().map(|r| r.url.clone()).collect();
        let victims_escrows: Vec<String> = (cluster.owners().await.into_iter())
            .filter(|(_, o)| *o == cluster.replicas[victim].id)
            .map(|(e, _)| e)
            .collect();
        let progress = Progress::default();
        let streams = tokio::task::spawn_local(load(
            urls,
            STREAMS,
            format!("cycle {cycle}"),
            progress.clone(),
        ));
        poll(
            Duration::from_secs(30),
            "a third of the streams started",
            || {
                let p = progress.clone();
                async move { p.headers.get() >= STREAMS / 3 }
            },
        )
        .await;
        cluster.kill9(victim);
        let killed_at = Instant::now();
        let results = streams.await.unwrap();
        let failed_elsewhere: Vec<_> = results
            .iter()
            .filter(|(i, ok)| *i != victim && !ok)
            .collect();
        assert!(
            failed_elsewhere.is_empty(),
            "cycle {cycle}: clients of the surviving replicas saw errors: {failed_elsewhere:?}"
        );
        // Its escrows move to the survivors (three each) within the TTL and a margin.
        cluster
            .wait_spread(&survivors, 3, TTL + TAKEOVER_MARGIN)
            .await;
        let takeover = killed_at.elapsed();
        worst_takeover = worst_takeover.max(takeover);
        let owners = cluster.owners().await;
        assert!(victims_escrows
            .iter()
            .all(|e| owners[e] != cluster.replicas[victim].id));
        // The taken-over escrows serve from their new owners.
        for &s in &survivors {
            let url = &cluster.replicas[s].url;
            for i in 0..3 {
                let r = chat_detail(url, &format!("cycle {cycle} after kill {s}.{i}")).await;
                assert!(
                    r.is_ok(),
                    "cycle {cycle}: replica {s} after the takeover: {r:?}"
                );
            }
        }
        cluster.check_lockstep(&sim).await;

        // Restart: the escrows spread back by graceful handoff while the survivors serve.
        cluster.start(victim, &sim).await;
        let survivor_urls: Vec<String> = survivors
            .iter()
            .map(|s| cluster.replicas[*s].url.clone())
            .collect();
        let rebalance = tokio::task::spawn_local(load(
            survivor_urls,
            30,
            format!("cycle {cycle} rebalance"),
            Progress::default(),
        ));
        let spread = cluster.wait_spread(&[0, 1, 2], 2, TTL * 5).await;
        let results = rebalance.await.unwrap();
        let failed: Vec<_> = results.iter().filter(|(_, ok)| !ok).collect();
        assert!(
            failed.is_empty(),
            "cycle {cycle}: clients saw errors during the handoff: {failed:?}"
        );
        eprintln!(
            "cycle {cycle}: killed r{victim}, taken over in {takeover:?}, spread back in {spread:?}"
        );
    }
    cluster.check_lockstep(&sim).await;
    eprintln!(
        "{CYCLES} cycles in {:?}; slowest takeover {worst_takeover:?} (TTL {TTL:?})",
        test_started.elapsed()
    );
}
