//! A request whose escrow closes under its race, on a replica with no other escrow of the model
//! (two replicas on PostgreSQL, one escrow each): no nonce was granted to it, so it goes to the
//! owner of an escrow elsewhere instead of answering 503 — or, when it was forwarded here, it is
//! handed back to its forwarder (marked), which sends it to another owner.
//!
//! The race is made deterministic with the escrow actor's own mailbox: the actor is stalled
//! (`InjectStall`, fault injection on), `BeginDrain` is queued, then the request is sent. Its
//! pick runs at the edge over the published board (the escrow still takes requests: nothing
//! processed the drain yet) and its nonce request queues behind `BeginDrain`, so the escrow
//! refuses it as closed once the stall ends — the order of one mailbox, not a timing.

use std::time::{Duration, Instant};

use devshard_actors::{
    directory::GetEscrow,
    escrow::messages::{BeginDrain, InjectStall},
    store::Store,
};
use devshard_gateway::{
    app::RunningGateway,
    sim::{Profile, SimConfig},
};

use super::{
    live::{self, admin_get, client, metrics},
    pgdb::TestDb,
};

/// Long enough for the request to be picked while the mailbox waits (milliseconds here); the
/// request's answer comes after it.
const STALL_MS: u64 = 3_000;
const ESCROWS: [&str; 3] = ["41", "42", "43"];
const BODY: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"closing under me"}]}"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// The environment of replica `id` listening on `port`, registering `escrows`.
fn env(db_url: &str, id: &str, port: u16, escrows: &[&str]) -> Vec<(String, String)> {
    [
        ("DEVSHARD_DATABASE_URL", db_url.to_string()),
        ("DEVSHARD_REPLICA_ID", id.to_string()),
        ("DEVSHARD_LISTEN", format!("127.0.0.1:{port}")),
        ("DEVSHARD_ADVERTISE_URL", format!("http://127.0.0.1:{port}")),
        ("DEVSHARD_LEASE_TTL_MS", "1500".to_string()),
        ("DEVSHARD_ESCROWS", escrows.join(",")),
        ("DEVSHARD_DEBUG_FAULT_INJECTION", "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn borrowed(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The escrow of `escrows` whose lease `gw` holds and whose actor runs there, once there is
/// exactly one.
async fn owned(gw: &RunningGateway, escrows: &[&str]) -> Option<String> {
    let held: Vec<&str> = (escrows.iter().copied())
        .filter(|e| gw.store.holds_lease(e))
        .collect();
    let [one] = held[..] else { return None };
    let running = gw.directory.send(GetEscrow {
        escrow_id: one.to_string(),
    });
    running.await.ok().flatten().map(|_| one.to_string())
}

/// `POST /v1/chat/completions` with extra headers → (status, headers, body).
async fn chat(url: &str, headers: &[(&str, &str)]) -> (u16, awc::http::header::HeaderMap, String) {
    let mut req = client(4)
        .post(format!("{url}/v1/chat/completions"))
        .insert_header(("Content-Type", "application/json"));
    for (k, v) in headers {
        req = req.insert_header((*k, *v));
    }
    let mut resp = req.send_body(BODY).await.unwrap();
    let body = resp.body().limit(1 << 20).await.unwrap();
    let headers = resp.headers().clone();
    (
        resp.status().as_u16(),
        headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn header<'a>(h: &'a awc::http::header::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Inference nonces the escrows of `url` sequenced (each grant of a request is one).
async fn inference_nonces(url: &str) -> f64 {
    let (_, text) = metrics(url).await;
    sample(&text, "devshard_nonces_total{kind=\"inference\"}")
}

/// Stalls `escrow`'s actor on `gw` and queues `BeginDrain` behind the stall.
async fn close_under_the_next_race(gw: &RunningGateway, escrow: &str) {
    let addr = gw
        .directory
        .send(GetEscrow {
            escrow_id: escrow.to_string(),
        })
        .await
        .unwrap()
        .expect("the escrow runs here");
    // Answered once the handler ran: the mailbox is waiting from now on.
    addr.send(InjectStall { ms: STALL_MS }).await.unwrap();
    addr.do_send(BeginDrain);
}

#[actix_rt::test]
async fn a_request_whose_escrow_closes_under_its_race_is_served_by_another_replica() {
    let db = TestDb::new("reroute");
    let mut cfg = SimConfig::with_seed("reroute");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    let two = &ESCROWS[1..];
    cfg.escrow_ids = two.iter().map(|e| e.to_string()).collect();
    let (pa, pb) = (free_port(), free_port());
    let a_env = env(&db.url(), "a", pa, two);
    let a = live::start_with(cfg, &borrowed(&a_env), |_| {}).await;
    let b = a.replica(&borrowed(&env(&db.url(), "b", pb, two))).await;
    // One escrow each once spread (the ownership loop hands one over to b).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (x, y) = loop {
        if let (Some(x), Some(y)) = (owned(&a.gw, two).await, owned(&b, two).await) {
            if x != y {
                break (x, y);
            }
        }
        assert!(Instant::now() < deadline, "the escrows did not spread");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    for (url, id) in [(a.url(), "a"), (b.url.as_str(), "b")] {
        let (status, h, body) = chat(url, &[]).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            header(&h, "x-devshard-replica"),
            Some(id),
            "served where it came"
        );
    }

    // a's only escrow closes under the request's race: served by b (escrow y), nothing spent
    // on x.
    let before = inference_nonces(a.url()).await;
    assert!(before >= 1.0, "the warm-up request was an inference nonce");
    close_under_the_next_race(&a.gw, &x).await;
    let (status, h, body) = chat(a.url(), &[]).await;
    assert_eq!(status, 200, "rerouted, not 503: {body}");
    assert_eq!(header(&h, "x-devshard-replica"), Some("b"), "{h:?}");
    assert_eq!(header(&h, "x-devshard-escrow"), Some(y.as_str()), "{h:?}");
    let after = inference_nonces(a.url()).await;
    assert_eq!(after, before, "no nonce of {x} was granted to it");
    let (_, text) = metrics(a.url()).await;
    let forwarded = "devshard_requests_forwarded_total{outcome=\"after_escrow_closed\"}";
    assert_eq!(sample(&text, forwarded), 1.0, "{text}");
    let replaced = "devshard_gateway_escrow_replacements_total{result=\"forwarded\"}";
    assert_eq!(sample(&text, replaced), 1.0);
    let stayed = "devshard_gateway_escrow_replacements_total{result=\"no_other_escrow\"}";
    assert_eq!(sample(&text, stayed), 0.0);

    // Forwarded to b, whose only escrow closes under the race: handed back (503, marked), so
    // that its forwarder sends it to another owner; b keeps no record of it.
    let before = inference_nonces(&b.url).await;
    close_under_the_next_race(&b, &y).await;
    let rid = "handed-back-1";
    let (status, h, body) = chat(
        &b.url,
        &[("X-Devshard-Forwarded-By", "a"), ("X-Request-Id", rid)],
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(header(&h, "x-devshard-forward-refused"), Some("1"), "{h:?}");
    assert!(body.contains("closed for settlement"), "{body}");
    let after = inference_nonces(&b.url).await;
    assert_eq!(after, before, "no nonce of {y} was granted to it");
    let (_, text) = metrics(&b.url).await;
    let handed = "devshard_requests_forwarded_total{outcome=\"handed_back\"}";
    assert_eq!(sample(&text, handed), 1.0, "{text}");
    let returned = "devshard_gateway_escrow_replacements_total{result=\"returned\"}";
    assert_eq!(sample(&text, returned), 1.0);
    let (status, v) = admin_get(&b.url, &format!("/v1/requests/{rid}")).await;
    assert_eq!(status, 404, "b forgot the request it handed back: {v}");

    b.stop(false).await.unwrap();
    a.stop().await;
}

#[actix_rt::test]
async fn a_request_its_owner_hands_back_is_rerouted_to_another_owner() {
    let db = TestDb::new("handback");
    let mut cfg = SimConfig::with_seed("handback");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = ESCROWS.iter().map(|e| e.to_string()).collect();
    let ports = [free_port(), free_port(), free_port()];
    let a_env = env(&db.url(), "a", ports[0], &ESCROWS);
    let a = live::start_with(cfg, &borrowed(&a_env), |_| {}).await;
    let b = a
        .replica(&borrowed(&env(&db.url(), "b", ports[1], &ESCROWS)))
        .await;
    let c = a
        .replica(&borrowed(&env(&db.url(), "c", ports[2], &ESCROWS)))
        .await;
    let deadline = Instant::now() + Duration::from_secs(40);
    let (x, y, z) = loop {
        let owners = (
            owned(&a.gw, &ESCROWS).await,
            owned(&b, &ESCROWS).await,
            owned(&c, &ESCROWS).await,
        );
        if let (Some(x), Some(y), Some(z)) = owners {
            if x != y && y != z && x != z {
                break (x, y, z);
            }
        }
        assert!(Instant::now() < deadline, "the escrows did not spread");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    for (url, id) in [(a.url(), "a"), (b.url.as_str(), "b"), (c.url.as_str(), "c")] {
        let (status, h, body) = chat(url, &[]).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(header(&h, "x-devshard-replica"), Some(id));
    }
    // b's own escrow deactivated: b forwards every request, to a or to c (they take turns).
    let (status, v) =
        live::admin_post(&b.url, &format!("/v1/admin/escrows/{y}/deactivate"), "").await;
    assert_eq!(status, 200, "{v}");
    // a's escrow closes under the next race there. Two requests through b: one of them goes to a
    // first while its escrow's mailbox waits (they take turns), is handed back, and b sends it
    // on to c. (The other may reach a too, before the escrow's tick shows it closed: handed
    // back as well.)
    close_under_the_next_race(&a.gw, &x).await;
    for n in 0..2 {
        let (status, h, body) = chat(&b.url, &[]).await;
        assert_eq!(status, 200, "request {n}: {body}");
        assert_eq!(
            header(&h, "x-devshard-replica"),
            Some("c"),
            "request {n}: {h:?}"
        );
        assert_eq!(
            header(&h, "x-devshard-escrow"),
            Some(z.as_str()),
            "request {n}"
        );
    }
    let (_, text) = metrics(a.url()).await;
    let handed = "devshard_requests_forwarded_total{outcome=\"handed_back\"}";
    assert!(sample(&text, handed) >= 1.0, "a handed it back: {text}");
    let (_, text) = metrics(&b.url).await;
    let rerouted = "devshard_requests_forwarded_total{outcome=\"rerouted\"}";
    assert!(sample(&text, rerouted) >= 1.0, "b rerouted it: {text}");

    c.stop(false).await.unwrap();
    b.stop(false).await.unwrap();
    a.stop().await;
}
