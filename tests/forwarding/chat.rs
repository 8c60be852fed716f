//! Chat requests and escrow admin calls sent to a replica that does not own the escrow.

use super::support::{call, chat, two_replicas, REPLICA_A, REPLICA_B};

const FORWARDED_BY: &str = "X-Devshard-Forwarded-By";

/// `b` deactivates its own escrow 43: the model has no usable escrow on `b` any more, so its
/// requests go to `a` (escrow 42).
async fn b_without_usable_escrow(url: &str) {
    let off = call(url, "POST", "/v1/admin/escrows/43/deactivate", None, &[]).await;
    assert_eq!(off.status, 200, "{:?}", String::from_utf8_lossy(&off.body));
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[actix_rt::test]
async fn requests_without_a_local_escrow_are_served_by_the_owner_once() {
    let pair = two_replicas("fwd_chat").await;
    assert_eq!(pair.db.count("replicas"), 2, "both replicas announced");
    b_without_usable_escrow(&pair.b.url).await;

    // Served by `b` itself before nothing: `a`'s own requests name `a`.
    let own = chat(&pair.a.url, "on a", false, &[]).await;
    assert_eq!(own.status, 200, "{}", String::from_utf8_lossy(&own.body));
    assert_eq!(own.replica.as_deref(), Some(REPLICA_A));

    // Non-streaming through `b`: answered by `a`, escrow 42.
    let whole = chat(&pair.b.url, "via b, whole", false, &[]).await;
    assert_eq!(
        whole.status,
        200,
        "{}",
        String::from_utf8_lossy(&whole.body)
    );
    assert_eq!(
        whole.replica.as_deref(),
        Some(REPLICA_A),
        "served by the owner"
    );
    assert_eq!(whole.escrow.as_deref(), Some("42"));
    assert_eq!(
        whole.json()["object"],
        "chat.completion",
        "{:?}",
        whole.json()
    );

    // Streaming through `b`: the owner's SSE, to its end.
    let stream = chat(&pair.b.url, "via b, streamed", true, &[]).await;
    assert_eq!(
        stream.status,
        200,
        "{}",
        String::from_utf8_lossy(&stream.body)
    );
    assert_eq!(stream.replica.as_deref(), Some(REPLICA_A));
    assert!(
        stream.content_type.starts_with("text/event-stream"),
        "{}",
        stream.content_type
    );
    let text = String::from_utf8_lossy(&stream.body);
    assert!(text.contains("chat.completion.chunk"), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    // One hop: a request forwarded to `b` is never forwarded again.
    let again = chat(
        &pair.b.url,
        "second hop",
        false,
        &[(FORWARDED_BY, REPLICA_A)],
    )
    .await;
    assert_eq!(
        again.status,
        503,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert!(again.retry_after.is_some(), "503 carries Retry-After");
    assert_eq!(again.json()["error"]["code"], "forward_hop_limit");
    assert_eq!(
        again.replica.as_deref(),
        Some(REPLICA_B),
        "refused by b itself"
    );

    // Admin and debug calls about escrow 42 reach its owner.
    let info = call(&pair.b.url, "GET", "/v1/admin/escrows/42", None, &[]).await;
    assert_eq!(info.status, 200, "{}", String::from_utf8_lossy(&info.body));
    assert!(
        info.json()["snapshot"]["nonce"].as_u64().unwrap() >= 2,
        "{:?}",
        info.json()
    );
    let debug = call(&pair.b.url, "GET", "/v1/debug/escrows/42", None, &[]).await;
    assert_eq!(
        debug.status,
        200,
        "{}",
        String::from_utf8_lossy(&debug.body)
    );
    let synced = call(&pair.b.url, "POST", "/v1/admin/escrows/42/sync", None, &[]).await;
    assert_eq!(
        synced.status,
        200,
        "{}",
        String::from_utf8_lossy(&synced.body)
    );
    for i in 0..pair.sim.hosts().len() {
        let view = pair.sim.host_view(i, "42").expect("host session");
        assert_eq!(view.latest_nonce, synced.json()["nonce"].as_u64().unwrap());
    }

    // The models of every live escrow, across replicas.
    let models = call(&pair.b.url, "GET", "/v1/models", None, &[]).await;
    let model = &pair.sim.config().model;
    assert!(
        models.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == *model),
        "{:?}",
        models.json()
    );

    let metrics = call(&pair.b.url, "GET", "/metrics", None, &[]).await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        metric(
            &text,
            "devshard_requests_forwarded_total{outcome=\"forwarded\"}"
        ) >= 5.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "devshard_requests_forwarded_total{outcome=\"second_hop_refused\"}"
        ),
        1.0
    );
}

#[actix_rt::test]
async fn an_unreachable_owner_is_a_clear_503() {
    let mut pair = two_replicas("fwd_dead").await;
    b_without_usable_escrow(&pair.b.url).await;
    let warm = chat(&pair.b.url, "before", false, &[]).await;
    assert_eq!(warm.status, 200, "{}", String::from_utf8_lossy(&warm.body));

    // kill -9: `a`'s lease and replica row stay live until their TTL.
    pair.a.kill9();
    let dead = chat(&pair.b.url, "after", true, &[]).await;
    assert_eq!(dead.status, 503, "{}", String::from_utf8_lossy(&dead.body));
    assert!(dead.retry_after.is_some(), "503 carries Retry-After");
    let error = &dead.json()["error"];
    assert_eq!(error["code"], "owner_unreachable", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(REPLICA_A) && message.contains("42"),
        "{message}"
    );
}
