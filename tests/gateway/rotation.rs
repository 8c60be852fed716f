//! Rotation under load against the simulated network (real gateway over loopback HTTP, real
//! Cosmos txs): with a small `max_nonce` every escrow runs low within seconds; the rotation
//! creates its replacement first, the running-low escrow drains and settles on chain, no request
//! fails, and the deposits stay within the daily cap — also across a restart.

use std::{
    cell::Cell,
    rc::Rc,
    time::{Duration, Instant},
};

use devshard_gateway::{
    rotation::settings::{ModelRotation, RotationSettings},
    sim::{EscrowStatus, Profile, SimConfig},
};
use serde_json::Value;

use super::live::{self, admin_get, chat};

const STREAMS: usize = 4;

pub(crate) fn sim_config(seed: &str, max_nonce: u64) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 4;
    cfg.profile = Profile::Zero;
    cfg.output_tokens = 5;
    cfg.max_nonce = max_nonce;
    cfg
}

pub(crate) fn rotation(model: &str, amount: u64, cap: u64, nonce_margin: u64) -> RotationSettings {
    RotationSettings {
        enabled: true,
        check_interval_ms: 100,
        backoff_first_ms: 200,
        backoff_max_ms: 2_000,
        models: vec![ModelRotation {
            model: model.to_owned(),
            target_count: 1,
            amount,
            max_deposit_per_day: cap,
            nonce_margin,
            reserve_requests: 8,
            margin_s: 60,
            // No spares: these escrows last seconds, and the tests count what serves.
            max_spares: 0,
        }],
        ..RotationSettings::default()
    }
}

pub(crate) async fn view(url: &str) -> Value {
    let (status, v) = admin_get(url, "/v1/admin/rotation").await;
    assert_eq!(status, 200, "{v}");
    v["view"].clone()
}

/// The value of one Prometheus sample line that starts with `prefix`.
pub(crate) async fn metric(url: &str, prefix: &str) -> Option<f64> {
    let mut resp = live::client(2)
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap();
    let text = String::from_utf8(resp.body().limit(8 << 20).await.unwrap().to_vec()).unwrap();
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `PUT /v1/admin/settings` → (status, JSON).
pub(crate) async fn put_settings(url: &str, body: &Value) -> (u16, Value) {
    let mut resp = live::client(2)
        .put(format!("{url}/v1/admin/settings"))
        .insert_header(("Authorization", format!("Bearer {}", live::ADMIN)))
        .send_json(body)
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// `STREAMS` request loops until `done` holds (bounded by `max` requests); (sent, failed).
pub(crate) async fn load(url: &str, max: usize, done: impl Fn() -> bool) -> (usize, usize) {
    let sent = Rc::new(Cell::new(0usize));
    let failed = Rc::new(Cell::new(0usize));
    let body = serde_json::json!({"messages": [{"role": "user", "content": "rotate"}],
        "max_tokens": 8, "stream": true})
    .to_string();
    let done = &done;
    let streams = (0..STREAMS).map(|_| {
        let (sent, failed, body) = (sent.clone(), failed.clone(), body.clone());
        async move {
            while sent.get() < max && !done() {
                sent.set(sent.get() + 1);
                let (status, _, bytes) = chat(url, &body).await;
                if status != 200 || !String::from_utf8_lossy(&bytes).contains("[DONE]") {
                    failed.set(failed.get() + 1);
                    eprintln!("failed: {status} {}", String::from_utf8_lossy(&bytes));
                }
            }
        }
    });
    futures::future::join_all(streams).await;
    (sent.get(), failed.get())
}

#[actix_rt::test]
async fn rotation_under_steady_load_replaces_escrows_before_they_run_dry() {
    // ~100 requests per escrow; the replacement is due 100 nonces before the serving limit (the
    // operator's room for a creation to land: this zero-latency load reaches ~300 req/s inside
    // the full suite, and 70 nonces were once too few).
    let cfg = sim_config("rotation-load", 160);
    let model = cfg.model.clone();
    let cap = 6_000_000_000;
    let l = live::start_with(cfg, &[], |c| {
        c.rotation = rotation(&model, 1_000_000_000, cap, 100)
    })
    .await;
    let url = l.url().to_string();
    let started = Instant::now();
    let (sent, failed) = load(&url, 3_000, || l.sim.created_escrows().len() >= 4).await;
    let created = l.sim.created_escrows();
    eprintln!(
        "rotation load: {sent} requests, {failed} failed, {} created in {:?}",
        created.len(),
        started.elapsed()
    );
    assert_eq!(failed, 0, "no request fails while escrows rotate");
    assert!(created.len() >= 4, "at least 4 rotations: {created:?}");

    // Every escrow that retired settles on chain; the newest keeps serving once the rotation
    // lists it (its registration may trail its creation on chain).
    let mut ids: Vec<u64> = created.values().map(|i| i.parse().unwrap()).collect();
    ids.push(42);
    ids.sort_unstable();
    let newest = ids[ids.len() - 1].to_string();
    let role_of = |v: &serde_json::Value, id: &str| {
        v["models"][0]["escrows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["escrow_id"] == id)
            .and_then(|e| e["role"].as_str().map(str::to_owned))
    };
    let mut v = view(&url).await;
    for _ in 0..50 {
        let rotated = v["models"][0]["rotations"].as_u64().unwrap() >= 4;
        if rotated && role_of(&v, &newest).as_deref() == Some("active") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        v = view(&url).await;
    }
    assert!(v["models"][0]["rotations"].as_u64().unwrap() >= 4, "{v}");
    // The escrows that still serve are the newest one, and on a loaded machine maybe the one
    // before: it counted as low for a moment while many of its inferences were unsettled (each
    // may still take a nonce), and came back once they settled (CI's run: 45 active at nonce
    // 50 of 155 beside 46). Every other escrow retired.
    let serving: Vec<String> = v["models"][0]["escrows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| matches!(e["role"].as_str(), Some("active" | "low")))
        .map(|e| e["escrow_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(serving.contains(&newest) && serving.len() <= 2, "{v}");
    let retired: Vec<String> = ids
        .iter()
        .map(u64::to_string)
        .filter(|id| !serving.contains(id))
        .collect();
    assert!(retired.len() >= 3, "at least 3 escrows retired: {v}");
    for id in &retired {
        let mut settled = false;
        for _ in 0..600 {
            if matches!(l.sim.escrow_status(id), Some(EscrowStatus::Settled { .. })) {
                settled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            settled,
            "retired escrow {id} settled on chain: {}",
            view(&url).await
        );
    }
    // Deposits within the cap: the chain's own record of each creation, and the gauge.
    let deposited: u64 = created
        .values()
        .map(|id| l.sim.escrow(id).unwrap().amount)
        .sum();
    assert!(deposited <= cap, "{deposited} within {cap}");
    let gauge = metric(&url, "devshard_rotation_deposit_today{")
        .await
        .unwrap();
    assert_eq!(gauge as u64, deposited);
    let ok = metric(&url, "devshard_escrow_creations_total{result=\"created\"}").await;
    assert_eq!(ok.unwrap() as usize, created.len());
    // The debug listing shows the rotation and each escrow's role.
    let actors = live::actors(&url, "").await;
    assert!(actors
        .iter()
        .any(|a| a["kind"] == "rotation" && a["state"] == "rotating"));
    let roles: Vec<&str> = actors
        .iter()
        .filter(|a| a["kind"] == "settlement")
        .map(|a| a["detail"]["role"].as_str().unwrap())
        .collect();
    assert!(
        roles.contains(&"active") && roles.contains(&"settled"),
        "{roles:?}"
    );
    l.stop().await;
}

#[actix_rt::test]
async fn the_daily_deposit_cap_is_never_exceeded_even_across_a_restart() {
    let cfg = sim_config("rotation-cap", 200);
    let model = cfg.model.clone();
    let amount = 1_000_000_000;
    // Room for two creations a day.
    let cap = 2 * amount + amount / 2;
    let l = live::start_with(cfg, &[], |_| {}).await;
    let url = l.url().to_string();
    // An invalid rotation is refused field by field.
    let bad = serde_json::json!({"rotation": {"models": [{"model": "", "target_count": 0,
        "amount": 5, "max_deposit_per_day": 5}]}});
    let (status, body) = put_settings(&url, &bad).await;
    assert_eq!(status, 400, "{body}");
    let fields: Vec<&str> = body["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "rotation.models[0].model",
            "rotation.models[0].target_count"
        ]
    );
    // Turned on by the admin (persisted: it holds after the restart below). The margin is the
    // operator's room for a creation to land: 170 of 200 nonces. This zero-latency load reaches
    // ~300 req/s inside the full suite and more when run alone, and a creation (the 100 ms
    // check, the tx, its block) takes ~250 ms: 50 nonces, then 70 of 100, were once too few.
    let patch = serde_json::json!({"rotation": rotation(&model, amount, cap, 170)});
    let (status, body) = put_settings(&url, &patch).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rotation"]["models"][0]["max_deposit_per_day"], cap);
    let (_, failed) = load(&url, 400, || l.sim.created_escrows().len() >= 2).await;
    assert_eq!(failed, 0, "no request fails before the two creations");
    // The third replacement is due but capped: the load exhausts the newest escrow.
    let _ = load(&url, 800, || false).await;
    let v = view(&url).await;
    let m = &v["models"][0];
    assert_eq!(m["decision"]["decision"], "cap_reached", "{v}");
    // Each escrow's burn rate is measured between checks, and moves where it runs low.
    let escrows = m["escrows"].as_array().unwrap();
    assert!(
        escrows
            .iter()
            .any(|e| e["burn_per_s"].as_u64() > Some(0) && e["low_at"].as_u64() >= Some(170)),
        "{v}"
    );
    assert_eq!(m["deposited_today"], 2 * amount);
    assert_eq!(l.sim.created_escrows().len(), 2);

    // A restart reads today's deposits back: still capped, nothing created.
    let l = l.restart(&[]).await;
    let url = l.url().to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = view(&url).await;
    assert_eq!(v["models"][0]["decision"]["decision"], "cap_reached", "{v}");
    assert_eq!(v["models"][0]["deposited_today"], 2 * amount);
    assert_eq!(
        l.sim.created_escrows().len(),
        2,
        "the cap holds after a restart"
    );
    let total: u64 = l
        .sim
        .created_escrows()
        .values()
        .map(|id| l.sim.escrow(id).unwrap().amount)
        .sum();
    assert!(total <= cap);
    l.stop().await;
}

#[actix_rt::test]
async fn failed_creations_back_off_and_are_visible() {
    let cfg = sim_config("rotation-backoff", 20_000);
    let model = cfg.model.clone();
    let l = live::start_with(cfg, &[], |_| {}).await;
    let url = l.url().to_string();
    // The chain refuses the next two creation txs.
    l.sim.set_tx_faults(devshard_gateway::sim::TxFaults {
        reject_code: 13,
        reject_times: 2,
        ..Default::default()
    });
    // Two escrows wanted, one registered: a creation is due at once.
    let mut r = rotation(&model, 1_000_000_000, 10_000_000_000, 30);
    r.models[0].target_count = 2;
    r.backoff_first_ms = 1_000;
    r.backoff_max_ms = 4_000;
    let (status, body) = put_settings(&url, &serde_json::json!({"rotation": r})).await;
    assert_eq!(status, 200, "{body}");
    let mut seen = Value::Null;
    for _ in 0..100 {
        let v = view(&url).await;
        if v["models"][0]["failures"].as_u64().unwrap_or(0) >= 1 {
            seen = v;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let m = &seen["models"][0];
    assert!(m["backoff_until_ms"].as_i64().unwrap() > 0, "{seen}");
    assert!(
        m["last_error"].as_str().unwrap().contains("code 13"),
        "{seen}"
    );
    assert_eq!(
        metric(&url, "devshard_rotation_backing_off{").await,
        Some(1.0)
    );
    // After the back-off the third try succeeds; the failures reset.
    for _ in 0..200 {
        if l.sim.created_escrows().len() == 1 && view(&url).await["models"][0]["failures"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(l.sim.created_escrows().len(), 1);
    assert_eq!(
        metric(&url, "devshard_escrow_creations_total{result=\"refused\"}").await,
        Some(2.0)
    );
    assert_eq!(
        metric(&url, "devshard_rotation_backing_off{").await,
        Some(0.0)
    );
    l.stop().await;
}
