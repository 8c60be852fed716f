//! Relaxed PoC routing for real (real time, as `poc.rs`): during PoC a request goes only to the
//! hosts of participants the chain keeps preserved for the model (the simulator preserves the
//! even-indexed hosts and, here, disables the others during PoC); an escrow without such a host
//! answers as `off` mode does; once PoC is over every host serves again.

use std::time::Duration;

use devshard_gateway::sim::SimConfig;

use crate::poc::{
    chat, nonce, sim_config, start_with, wait_for_admission, wait_for_admission_within,
};

/// Four hosts (0 and 2 preserved), the others answering `requests_disabled` during PoC, and a
/// PoC of 10 s (100 blocks of 100 ms) so a loaded machine still serves inside it.
fn four_hosts(seed: &str) -> SimConfig {
    let mut cfg = sim_config(seed);
    cfg.hosts = 4;
    cfg.epochs.poc_generate_blocks = 80;
    cfg.epochs.hosts_disable_during_poc = true;
    cfg
}

fn chats(sim: &devshard_gateway::sim::SimNetwork) -> Vec<u64> {
    (0..4).map(|i| sim.counters(i).unwrap().chat).collect()
}

#[actix_rt::test]
async fn during_poc_only_preserved_hosts_get_requests_and_afterwards_all_do() {
    let (sim, gw, dir) = start_with(four_hosts("poc-routing"), "relaxed").await;
    let model = sim.config().model.clone();
    let view = wait_for_admission(&gw.url, &model, "serve_only").await;
    let preserved = view["admission"][&model]["preserved"].as_array().unwrap();
    let want: Vec<String> = [0, 2]
        .iter()
        .map(|&i| sim.hosts()[i].address.to_string())
        .collect();
    assert_eq!(preserved.len(), 2, "{view}");
    assert!(preserved
        .iter()
        .all(|p| want.contains(&p.as_str().unwrap().to_string())));
    for i in 0..6 {
        let (status, _, body) = chat(&gw.url).await;
        assert_eq!(status, 200, "request {i}: {body}");
    }
    assert!(sim.epoch().is_poc(), "the chain was still in PoC");
    let during = chats(&sim);
    assert_eq!(
        (during[1], during[3]),
        (0, 0),
        "non-preserved hosts got {during:?}"
    );
    assert!(during[0] + during[2] >= 6, "{during:?}");
    assert!(
        nonce(&gw.url).await > 6,
        "the other hosts' nonces were passed over"
    );

    wait_for_admission_within(&gw.url, &model, "serve", Duration::from_secs(30)).await;
    for i in 0..8 {
        let (status, _, body) = chat(&gw.url).await;
        assert_eq!(status, 200, "request {i} after PoC: {body}");
    }
    let after = chats(&sim);
    assert!(
        (0..4).all(|i| after[i] > during[i]),
        "{during:?} → {after:?}"
    );
    gw.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix_rt::test]
async fn an_escrow_without_a_preserved_host_answers_as_off_mode_during_poc() {
    let mut cfg = four_hosts("poc-routing-none");
    cfg.slot_hosts = Some(vec![1, 3]);
    let (sim, gw, dir) = start_with(cfg, "relaxed").await;
    let model = sim.config().model.clone();
    wait_for_admission(&gw.url, &model, "serve_only").await;
    let (status, retry, body) = chat(&gw.url).await;
    assert!(sim.epoch().is_poc(), "the chain was still in PoC");
    assert_eq!(status, 503, "{body}");
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=3_600).contains(&retry), "{retry}");
    assert_eq!(body["error"]["code"], "poc_in_progress", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("devshard temporarily unavailable during PoC")
            && message.contains("has a host preserved"),
        "{message}"
    );
    assert_eq!(nonce(&gw.url).await, 0, "no nonce consumed");
    assert_eq!(chats(&sim), vec![0; 4]);
    gw.stop(true).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
