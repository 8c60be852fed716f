//! One participants read at start: registering 50 escrows takes the participants (for each
//! escrow's model) from the chain poller's snapshot, waiting for the first one, and makes no
//! public-API request of its own.

use devshard_gateway::sim::{Profile, SimConfig};

use crate::live;

const PARTICIPANTS: &str = "/v1/epochs/current/participants";

#[actix_rt::test]
async fn fifty_escrows_registered_at_start_read_the_participants_once() {
    let mut cfg = SimConfig::with_seed("startup-50");
    cfg.hosts = 7;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = (1..=50).map(|i| i.to_string()).collect();
    let ids = cfg.escrow_ids.join(",");
    let l = live::start_with(cfg, &[("DEVSHARD_ESCROWS", ids.as_str())], |_| {}).await;
    let (status, escrows) = live::admin_get(l.url(), "/v1/admin/escrows").await;
    assert_eq!(status, 200);
    assert_eq!(
        escrows["data"].as_array().map(Vec::len),
        Some(50),
        "all 50 registered"
    );
    let model = l.sim.config().model.clone();
    assert!(
        escrows["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["model"] == model.as_str()),
        "each escrow's model came from the participants snapshot"
    );
    let log = l.sim.chain_requests();
    let started = log.recent.front().map_or(0, |r| r.at_ms);
    let reads: Vec<i64> = log
        .recent
        .iter()
        .filter(|r| r.path.starts_with(PARTICIPANTS))
        .map(|r| r.at_ms)
        .collect();
    // The poller reads the participants at start and then every 60 s: within the first minute
    // that is one read (two at most if the minute straddles its second poll).
    assert!(
        !reads.is_empty() && reads.iter().filter(|&&t| t < started + 60_000).count() <= 2,
        "participants reads in the first minute: {reads:?} (by path: {:?})",
        log.by_path
    );
    let public: usize = log
        .recent
        .iter()
        .filter(|r| r.path.starts_with("/v1/epochs") && r.at_ms < started + 60_000)
        .count();
    assert!(
        public <= 6,
        "public API requests within the budget: {public}"
    );
    l.stop().await;
}
