//! Spares for short-lived escrows (`src/rotation/runway.rs`), against the simulated network:
//! seed 12 of the chaos runner met 503 `no_escrow_available` after a chain outage outlasted its
//! one serving escrow (low at half its nonces, its replacement's creation refused until the chain
//! came back). With spares the model keeps escrows serving beyond `target_count` while the
//! serving ones last less than `margin_s`, so an outage longer than one escrow lasts is served.

use std::time::Duration;

use devshard_gateway::sim::ChainFaults;
use serde_json::Value;

use super::{
    live::{self, admin_post},
    rotation::{load, metric, rotation, sim_config, view},
};

#[actix_rt::test]
async fn seed12_a_chain_outage_longer_than_one_short_escrow_lasts_is_served_by_the_spares() {
    // 400 nonces an escrow: about 250 requests of this zero-latency load, a second or two.
    let cfg = sim_config("rotation-spares", 400);
    let model = cfg.model.clone();
    let l = live::start_with(cfg, &[], |c| {
        let mut r = rotation(&model, 1_000_000_000, 100_000_000_000, 50);
        r.models[0].margin_s = 20;
        r.models[0].max_spares = 4;
        c.rotation = r;
    })
    .await;
    let url = l.url().to_string();
    // Load until the rotation keeps spares: five escrows serving (target 1 + 4 spares).
    let serving = |v: &Value| v["models"][0]["serving"].as_u64().unwrap_or(0);
    let mut v = view(&url).await;
    for _ in 0..20 {
        if serving(&v) >= 5 {
            break;
        }
        let (_, failed) = load(&url, 200, || false).await;
        assert_eq!(failed, 0, "no request fails while the spares are created");
        v = view(&url).await;
    }
    assert!(serving(&v) >= 5, "spares serve: {v}");
    let runway = v["models"][0]["runway_nonces"].as_u64().unwrap();
    assert!(runway > 800, "the spares' runway outlasts one escrow: {v}");
    let spares = metric(
        &url,
        "devshard_rotations_total{model=\"Qwen/Qwen3-235B-A22B-Instruct-2507-FP8\",why=\"spare\"}",
    )
    .await;
    assert!(spares >= Some(1.0), "{spares:?}");

    // The chain answers 503 to everything: no creation can land. The load goes on for more
    // nonces than one escrow has (each request takes at least one), within the spares' runway.
    let created = l.sim.created_escrows().len();
    l.sim.set_chain_faults(ChainFaults {
        http_status: Some(503),
        ..ChainFaults::default()
    });
    let (sent, failed) = load(&url, 450, || false).await;
    assert_eq!(
        (sent, failed),
        (450, 0),
        "served through the outage: {}",
        view(&url).await
    );
    // Nothing was created meanwhile: the spares served it.
    assert_eq!(l.sim.created_escrows().len(), created);
    l.sim.clear_chain_faults();
    l.stop().await;
}

#[actix_rt::test]
async fn a_dry_model_tries_its_creation_again_after_the_first_delay_not_a_doubled_one() {
    let cfg = sim_config("rotation-dry", 20_000);
    let model = cfg.model.clone();
    let l = live::start_with(cfg, &[], |_| {}).await;
    let url = l.url().to_string();
    // The only escrow is deactivated: nothing of the model can serve.
    let (s, body) = admin_post(&url, "/v1/admin/escrows/42/deactivate", "").await;
    assert_eq!(s, 200, "{body}");
    l.sim.set_tx_faults(devshard_gateway::sim::TxFaults {
        reject_code: 13,
        reject_times: 4,
        ..Default::default()
    });
    let mut r = rotation(&model, 1_000_000_000, 10_000_000_000, 30);
    r.backoff_first_ms = 300;
    r.backoff_max_ms = 10_000;
    let (status, body) =
        super::rotation::put_settings(&url, &serde_json::json!({"rotation": r})).await;
    assert_eq!(status, 200, "{body}");
    // Four refusals in a row: doubled, the fourth wait would be 2.4 s and the four 4.5 s.
    let started = std::time::Instant::now();
    let mut m = Value::Null;
    for _ in 0..300 {
        let v = view(&url).await;
        m = v["models"][0].clone();
        if m["failures"].as_u64() >= Some(4) {
            let wait =
                m["backoff_until_ms"].as_i64().unwrap() - v["last_check_ms"].as_i64().unwrap();
            assert!(
                wait <= 300,
                "the wait of a dry model stays at the first delay: {v}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(m["failures"].as_u64() >= Some(4), "{m}");
    eprintln!("four refused creations in {:?}", started.elapsed());
    // The fifth try lands.
    for _ in 0..300 {
        if l.sim.created_escrows().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(l.sim.created_escrows().len(), 1);
    l.stop().await;
}
