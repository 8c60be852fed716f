//! Warm keys across `kill -9` (LIFECYCLE.md §5): every host signs with a warm key; after the
//! gateway bound them all it is killed and restarted on the same data directory. It resumes with
//! the same bindings and the same root, and asks the chain about none of the bound keys again.

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{Profile, SimConfig, SimNetwork, WarmMode};
use serde_json::Value;

use super::{
    child::{free_port, temp_dir, Gateway},
    crash::check_lockstep,
};

fn grants_queries(sim: &SimNetwork) -> u64 {
    sim.chain_requests()
        .by_path
        .iter()
        .filter(|(p, _)| p.contains("grantees_by_message_type"))
        .map(|(_, n)| n)
        .sum()
}

fn bindings(snapshot: &Value) -> Value {
    snapshot["snapshot"]["warm_keys"].clone()
}

#[actix_rt::test]
async fn kill_9_restart_resumes_the_same_bindings_without_asking_the_chain() {
    let mut cfg = SimConfig::with_seed("warm-crash");
    cfg.hosts = 4;
    cfg.profile = Profile::Fast;
    cfg.output_tokens = 8;
    cfg.warm_keys = WarmMode::All;
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let dir = temp_dir("warm-crash");
    let port = free_port();
    let mut gw = Gateway::start(&sim, &dir, port, &["42"]).await;
    for i in 0..24 {
        let r = gw.chat(&format!("warm request {i}"), i % 2 == 0).await;
        assert!(r.is_ok(), "request {i}: {r:?}");
    }
    let nonce = check_lockstep(&gw, &sim).await;
    let before = gw.admin("GET", "/v1/admin/escrows/42").await;
    let bound = bindings(&before);
    assert_eq!(
        bound.as_object().map(|m| m.len()),
        Some(4),
        "every slot bound: {before}"
    );
    for i in 0..4 {
        let view = sim.host_view(i, "42").unwrap();
        assert_eq!(
            serde_json::to_value(view.state.warm_keys()).unwrap(),
            bound,
            "host {i} bound the same keys"
        );
    }
    let root = before["snapshot"]["state_root"].clone();
    let queries = grants_queries(&sim);
    assert!(
        queries > 0,
        "the first warm signatures were checked on chain"
    );

    gw.kill9();
    let gw = Gateway::start(&sim, &dir, port, &["42"]).await;
    let after = gw.admin("GET", "/v1/admin/escrows/42").await;
    assert_eq!(after["snapshot"]["nonce"].as_u64(), Some(nonce));
    assert_eq!(after["snapshot"]["state_root"], root, "same root");
    assert_eq!(bindings(&after), bound, "same bindings");
    for i in 0..8 {
        let r = gw.chat(&format!("after restart {i}"), i % 2 == 1).await;
        assert!(r.is_ok(), "request {i} after restart: {r:?}");
    }
    check_lockstep(&gw, &sim).await;
    assert_eq!(
        grants_queries(&sim),
        queries,
        "no grants query for keys that are already bound"
    );
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}
