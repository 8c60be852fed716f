//! The chain's public API and REST queries, PoC phases over (virtual) time, and the request log.

use std::time::Duration;

use devshard_gateway::sim::{ConfirmationPocSchedule, EpochSchedule, Faults, RECENT_REQUESTS};
use serde_json::Value;

use crate::client::{config, http, read_stream, start, Session};

async fn get(url: String) -> (u16, Value) {
    let mut resp = http().get(url).send().await.unwrap();
    let body = resp.body().await.unwrap();
    (
        resp.status().as_u16(),
        serde_json::from_slice(&body).unwrap(),
    )
}

fn short_epochs() -> EpochSchedule {
    EpochSchedule {
        block_time_ms: 1_000,
        epoch_length: 100,
        poc_generate_blocks: 10,
        poc_generate_wind_down_blocks: 2,
        poc_validate_blocks: 5,
        poc_validate_wind_down_blocks: 3,
        hosts_disable_during_poc: true,
        ..EpochSchedule::default()
    }
}

#[actix_rt::test]
async fn epochs_follow_the_clock_through_poc_and_hosts_close_during_it() {
    tokio::time::pause();
    let mut cfg = config(2);
    cfg.epochs = short_epochs();
    let net = start(cfg).await;
    let url = format!("{}/v1/epochs/latest", net.chain_url());
    let (status, e) = get(url.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(e["block_height"], 10_020);
    assert_eq!(e["phase"], "Inference");
    assert_eq!(e["latest_epoch"]["index"], 100);
    assert_eq!(e["latest_epoch"]["poc_start_block_height"], 10_000);
    assert_eq!(e["epoch_stages"]["set_new_validators"], 10_020);
    assert_eq!(e["epoch_stages"]["next_poc_start"], 10_100);
    assert_eq!(e["next_epoch_stages"]["set_new_validators"], 10_120);
    assert!(e["active_confirmation_poc_event"].is_null());

    tokio::time::sleep(Duration::from_secs(80)).await;
    let (_, e) = get(url.clone()).await;
    assert_eq!(
        (e["block_height"].as_u64(), e["phase"].as_str()),
        (Some(10_100), Some("PoCGenerate"))
    );
    assert_eq!(e["latest_epoch"]["index"], 101);
    // Host 1 (not preserved) refuses inference work; host 0 (preserved) serves.
    let mut s = Session::new(&net, "42");
    let (_, out) = s.infer(vec![], br#"{"stream":true}"#).await;
    assert_eq!(
        (out.status, out.header("x-devshard-error")),
        (503, Some("requests_disabled"))
    );
    let (_, out) = s.infer(vec![], br#"{"stream":true}"#).await;
    assert_eq!(out.status, 200, "nonce 2 runs on preserved host 0");
    for (secs, phase) in [
        (11, "PoCGenerateWindDown"),
        (2, "PoCValidate"),
        (5, "PoCValidateWindDown"),
        (3, "Inference"),
    ] {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let (_, e) = get(url.clone()).await;
        assert_eq!(e["phase"], phase);
    }
}

#[actix_rt::test]
async fn confirmation_poc_events_appear_on_schedule() {
    tokio::time::pause();
    let mut cfg = config(1);
    cfg.epochs = EpochSchedule {
        confirmation_poc: Some(ConfirmationPocSchedule {
            trigger_offset_blocks: 40,
            grace_blocks: 5,
            generation_blocks: 5,
            validation_blocks: 5,
        }),
        ..short_epochs()
    };
    let net = start(cfg).await;
    let url = format!("{}/v1/epochs/latest", net.chain_url());
    tokio::time::sleep(Duration::from_secs(26)).await;
    let (_, e) = get(url.clone()).await;
    assert_eq!(
        e["active_confirmation_poc_event"]["phase"],
        "CONFIRMATION_POC_GENERATION"
    );
    assert_eq!(e["active_confirmation_poc_event"]["trigger_height"], 10_040);
    assert_eq!(e["is_confirmation_poc_active"], true);
    assert_eq!(e["phase"], "Inference");
}

#[actix_rt::test]
async fn participants_escrow_params_and_versions() {
    tokio::time::pause();
    let net = start(config(3)).await;
    let (_, p) = get(format!(
        "{}/v1/epochs/current/participants",
        net.chain_url()
    ))
    .await;
    let list = p["active_participants"]["participants"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    for (i, entry) in list.iter().enumerate() {
        assert_eq!(entry["index"], net.hosts()[i].address.as_str());
        assert_eq!(entry["inference_url"], net.hosts()[i].url);
        assert_eq!(entry["models"][0], net.config().model);
        assert!(entry["weight"].as_u64().unwrap() >= 1_000);
        assert_eq!(
            entry["ml_nodes"][0]["ml_nodes"][0]["poc_weight"],
            entry["weight"]
        );
    }
    let rest = format!("{}/productscience/inference/inference", net.chain_url());
    let (status, e) = get(format!("{rest}/devshard_escrow/42")).await;
    assert_eq!(status, 200);
    assert_eq!(e["found"], true);
    let escrow = &e["escrow"];
    assert_eq!(escrow["id"], "42");
    assert_eq!(escrow["creator"], net.gateway_key().address().as_str());
    assert_eq!(escrow["amount"], "1000000000");
    assert_eq!(escrow["fee_per_nonce"], "1000");
    assert_eq!(escrow["epoch_index"], "100");
    assert_eq!(escrow["slots"].as_array().unwrap().len(), 3);
    assert_eq!(escrow["session_config"]["vote_threshold"], 1);
    let (_, missing) = get(format!("{rest}/devshard_escrow/9")).await;
    assert_eq!(missing, serde_json::json!({"found": false}));
    let addr = net.hosts()[1].address.clone();
    let (_, part) = get(format!("{rest}/participant/{addr}")).await;
    assert_eq!(part["participant"]["inference_url"], net.hosts()[1].url);
    let (status, _) = get(format!("{rest}/participant/gonka1nobody")).await;
    assert_eq!(status, 404);
    let (_, params) = get(format!("{rest}/params")).await;
    let p = &params["params"]["devshard_escrow_params"];
    assert_eq!(
        (
            p["refusal_timeout"].as_str(),
            p["execution_timeout"].as_str()
        ),
        (Some("60"), Some("1200"))
    );
    let (_, v) = get(format!("{}/v1/versions", net.hosts()[0].url)).await;
    assert_eq!(v["mlnodes"][0]["node_id"], "mlnode-0");
    assert_eq!(v["mlnodes"][0]["poc_validation_inference"], true);
}

#[actix_rt::test]
async fn requests_are_counted_per_path_and_client_with_recent_timestamps() {
    tokio::time::pause();
    let net = start(config(2)).await;
    let client = http();
    let latest = format!("{}/v1/epochs/latest", net.chain_url());
    client.get(&latest).send().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    client
        .get(&latest)
        .insert_header(("X-Forwarded-For", "10.0.0.7, 10.0.0.1"))
        .send()
        .await
        .unwrap();
    client
        .get(format!("{}/v1/versions", net.hosts()[1].url))
        .send()
        .await
        .unwrap();
    let log = net.chain_requests();
    assert_eq!(log.total, 3);
    assert_eq!(log.by_path["/v1/epochs/latest"], 2);
    assert_eq!(log.by_client["10.0.0.7"], 1);
    assert_eq!(log.by_client["127.0.0.1"], 2);
    assert_eq!(log.by_server["host-1"], 1);
    assert_eq!(log.by_client_path["10.0.0.7"]["/v1/epochs/latest"], 1);
    let times: Vec<i64> = log.recent.iter().map(|r| r.at_ms).collect();
    assert!(
        (5_000..5_100).contains(&(times[1] - times[0])),
        "virtual-time timestamps"
    );
    // The same through the control API, and the reset.
    let (_, body) = get(format!("{}/sim/chain/requests", net.control_url())).await;
    assert_eq!(body["by_path"]["/v1/epochs/latest"], 2);
    assert_eq!(net.counters(1).unwrap().versions, 1);
    let resp = client
        .post(format!("{}/sim/chain/requests/reset", net.control_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(net.chain_requests().total, 0);
    // Only the last 1 000 requests are kept.
    for _ in 0..RECENT_REQUESTS + 5 {
        client.get(&latest).send().await.unwrap();
    }
    let log = net.chain_requests();
    assert_eq!(
        (log.total, log.recent.len()),
        (RECENT_REQUESTS as u64 + 5, RECENT_REQUESTS)
    );
}

#[actix_rt::test]
async fn chat_faults_do_not_touch_the_chain() {
    tokio::time::pause();
    let net = start(config(2)).await;
    net.set_all_faults(Faults {
        http_status: Some(500),
        ..Faults::default()
    });
    let mut s = Session::new(&net, "42");
    let (_, out) = s.infer(vec![], b"{}").await;
    assert_eq!(out.message(), "escrow not found");
    let (_, e) = get(format!(
        "{}/productscience/inference/inference/devshard_escrow/42",
        net.chain_url()
    ))
    .await;
    assert_eq!(e["found"], true, "the chain still has it");
    let _ = read_stream;
}
