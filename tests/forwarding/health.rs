//! Host health and settings changed on one replica are applied by the other within a second
//! (`LISTEN/NOTIFY`).

use std::time::{Duration, Instant};

use super::support::{call, two_replicas};

/// How soon the other replica must apply a change (the bound).
const WITHIN: Duration = Duration::from_secs(1);

/// Polls `check` on a bounded deadline; returns how long it took.
async fn within(deadline: Duration, mut check: impl AsyncFnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn participant(url: &str, key: &str) -> serde_json::Value {
    let list = call(url, "GET", "/v1/admin/participants", None, &[]).await;
    list.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["participant_key"] == key)
        .cloned()
        .unwrap_or_default()
}

#[actix_rt::test]
async fn an_ejection_and_a_settings_change_on_a_reach_b_within_a_second() {
    let pair = two_replicas("fwd_health").await;
    let host = pair.sim.hosts()[0].address.to_string();
    let before = participant(&pair.b.url, &host).await;
    assert_eq!(before["routable"], true, "{before}");

    let body = serde_json::json!({"participant_key": host});
    let ejected = call(
        &pair.a.url,
        "POST",
        "/v1/admin/participants/eject",
        Some(body),
        &[],
    )
    .await;
    assert_eq!(
        ejected.status,
        200,
        "{}",
        String::from_utf8_lossy(&ejected.body)
    );
    let took = within(WITHIN, async || {
        let p = participant(&pair.b.url, &host).await;
        p["state"] == "ejected" && p["routable"] == false
    })
    .await;
    eprintln!("ejection seen on b after {took:?}");
    assert!(took.is_some(), "b still routes to the host a ejected");

    let body = serde_json::json!({"participant_key": host});
    let back = call(
        &pair.a.url,
        "POST",
        "/v1/admin/participants/unquarantine",
        Some(body),
        &[],
    )
    .await;
    assert_eq!(back.status, 200);
    let took = within(WITHIN, async || {
        participant(&pair.b.url, &host).await["routable"] == true
    })
    .await;
    assert!(took.is_some(), "b still withholds the host a unquarantined");

    let patch = serde_json::json!({"health": {"hedge_budget": 0.02}});
    let put = call(&pair.a.url, "PUT", "/v1/admin/settings", Some(patch), &[]).await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    let took = within(WITHIN, async || {
        let s = call(&pair.b.url, "GET", "/v1/admin/settings", None, &[]).await;
        s.json()["health"]["hedge_budget"] == 0.02
    })
    .await;
    assert!(took.is_some(), "b did not reload the settings a changed");

    // Chain polling and rotation too (b reloads them from the store on the same event).
    let patch = serde_json::json!({"chain_poll": {"chain_phase_poll_interval_ms": 31_000},
        "rotation": {"check_interval_ms": 700}});
    let put = call(&pair.a.url, "PUT", "/v1/admin/settings", Some(patch), &[]).await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    let took = within(WITHIN, async || {
        let s = call(&pair.b.url, "GET", "/v1/admin/settings", None, &[])
            .await
            .json();
        s["chain_poll"]["chain_phase_poll_interval_ms"] == 31_000
            && s["rotation"]["check_interval_ms"] == 700
    })
    .await;
    assert!(
        took.is_some(),
        "b did not reload the chain polling and rotation settings a changed"
    );
}

/// `pg_stat_activity` rows of this schema's listening connections (both replicas').
const LISTENERS: &str = "pg_stat_activity WHERE query LIKE 'LISTEN %' \
     AND query LIKE '%' || current_schema() || '%'";

#[actix_rt::test]
async fn a_dropped_listener_reconnects_and_catches_up_on_what_it_missed() {
    let pair = two_replicas("fwd_relisten").await;
    let host = pair.sim.hosts()[1].address.to_string();
    assert_eq!(participant(&pair.b.url, &host).await["routable"], true);
    let listening = within(Duration::from_secs(5), async || {
        pair.db.count(LISTENERS) == 2
    })
    .await;
    assert!(listening.is_some(), "both replicas listen");

    pair.db
        .execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM {LISTENERS}"
        ))
        .unwrap();
    // Sent while b's listener is down (it waits before reconnecting): b catches up on reconnect.
    let body = serde_json::json!({"participant_key": host});
    let ejected = call(
        &pair.a.url,
        "POST",
        "/v1/admin/participants/eject",
        Some(body),
        &[],
    )
    .await;
    assert_eq!(ejected.status, 200);
    let took = within(Duration::from_secs(10), async || {
        participant(&pair.b.url, &host).await["routable"] == false
    })
    .await;
    eprintln!("ejection seen on b after a reconnect: {took:?}");
    assert!(
        took.is_some(),
        "b never caught up after its listener dropped"
    );
    let back = within(Duration::from_secs(5), async || {
        pair.db.count(LISTENERS) == 2
    })
    .await;
    assert!(back.is_some(), "both replicas listen again");
}

#[actix_rt::test]
async fn an_ejection_decided_by_a_itself_reaches_b() {
    let pair = two_replicas("fwd_own").await;
    let host = pair.sim.hosts()[0].address.to_string();
    assert_eq!(participant(&pair.b.url, &host).await["routable"], true);
    pair.sim
        .set_faults(
            0,
            devshard_gateway::sim::Faults {
                empty_stream: true,
                ..Default::default()
            },
        )
        .unwrap();
    // Requests on a (escrow 42) until its own health decision ejects the failing host.
    let mut ejected_on_a = false;
    for i in 0..60 {
        let _ = super::support::chat(&pair.a.url, &format!("req {i}"), false, &[]).await;
        if participant(&pair.a.url, &host).await["state"] == "ejected" {
            ejected_on_a = true;
            break;
        }
    }
    assert!(
        ejected_on_a,
        "a never ejected the host that sends empty streams"
    );
    let took = within(WITHIN, async || {
        participant(&pair.b.url, &host).await["state"] == "ejected"
    })
    .await;
    eprintln!("a's own ejection seen on b after {took:?}");
    assert!(
        took.is_some(),
        "b still routes to the host a ejected by itself"
    );
}
