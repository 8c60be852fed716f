//! The control API next to the chain API: listing hosts, setting and clearing faults (one set,
//! a script, every host), latency, escrow and session views.

use awc::error::SendRequestError;
use serde_json::{json, Value};

use crate::client::{config, http, start, Session};

async fn call(method: &str, url: String, body: Option<Value>) -> (u16, Value) {
    let client = http();
    let req = match method {
        "GET" => client.get(url),
        "PUT" => client.put(url),
        "DELETE" => client.delete(url),
        _ => client.post(url),
    };
    let mut resp = match body {
        Some(b) => req.send_json(&b).await.unwrap(),
        None => req.send().await.unwrap(),
    };
    let bytes = resp.body().await.unwrap();
    (
        resp.status().as_u16(),
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[actix_rt::test]
async fn hosts_are_listed_with_faults_and_counters() {
    tokio::time::pause();
    let net = start(config(3)).await;
    let base = format!("{}/sim", net.control_url());
    let (status, hosts) = call("GET", format!("{base}/hosts"), None).await;
    assert_eq!(status, 200);
    let hosts = hosts.as_array().unwrap();
    assert_eq!(hosts.len(), 3);
    assert_eq!(hosts[2]["index"], 2);
    assert_eq!(hosts[2]["address"], net.hosts()[2].address.as_str());
    assert_eq!(hosts[2]["url"], net.hosts()[2].url);
    assert_eq!(hosts[2]["faults"], json!({}));
    assert_eq!(
        hosts[2]["counters"],
        json!({"chat": 0, "verify_timeout": 0, "diffs": 0, "signatures": 0, "mempool": 0, "openai": 0, "versions": 0, "stragglers": 0})
    );
}

#[actix_rt::test]
async fn faults_are_set_scripted_and_cleared_over_http() {
    tokio::time::pause();
    let net = start(config(2)).await;
    let base = format!("{}/sim", net.control_url());
    let mut s = Session::new(&net, "42");
    let host = s.executor(1);
    let (status, entry) = call(
        "PUT",
        format!("{base}/hosts/{host}/faults"),
        Some(json!({"http_status": 429, "retry_after_s": 3})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        entry["faults"],
        json!({"http_status": 429, "retry_after_s": 3})
    );
    let (_, out) = s.infer(vec![], b"{}").await;
    assert_eq!((out.status, out.header("retry-after")), (429, Some("3")));
    let (status, entry) = call("DELETE", format!("{base}/hosts/{host}/faults"), None).await;
    assert_eq!((status, entry["faults"].clone()), (200, json!({})));
    assert_eq!(
        net.faults(host).unwrap(),
        devshard_gateway::sim::Faults::default()
    );

    // A typo in a knob is a 400 that names it; an unknown host a 404.
    let (status, err) = call(
        "PUT",
        format!("{base}/hosts/0/faults"),
        Some(json!({"omit_mta": true})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(err["message"].as_str().unwrap().contains("omit_mta"));
    let (status, _) = call("PUT", format!("{base}/hosts/7/faults"), Some(json!({}))).await;
    assert_eq!(status, 404);

    // A script over every host: the first request refused, the second empty.
    let script = json!([{"http_status": 503, "times": 1}, {"empty_stream": true, "times": 1}]);
    let (status, all) = call("PUT", format!("{base}/faults"), Some(script)).await;
    assert_eq!(status, 200);
    assert_eq!(all[1]["fault_script"].as_array().unwrap().len(), 2);
    let mut s = Session::new(&net, "42");
    assert_eq!(s.infer(vec![], b"{}").await.1.status, 503);
    let mut s = Session::new(&net, "42");
    let (_, out) = s.infer(vec![], br#"{"stream":true}"#).await;
    assert_eq!(out.chunks().len(), 1, "empty stream");
    let (_, hosts) = call("GET", format!("{base}/hosts"), None).await;
    assert_eq!(hosts[host]["counters"]["chat"], 3);
    assert_eq!(hosts[host]["fault_script"], json!([]));
    assert_eq!(
        hosts[1 - host]["fault_script"].as_array().unwrap().len(),
        2,
        "untouched host"
    );
    let (status, _) = call("DELETE", format!("{base}/faults"), None).await;
    assert_eq!(status, 200);
    assert!(net.faults(1 - host).unwrap().is_empty());
}

#[actix_rt::test]
async fn refuse_connections_over_http_really_closes_the_port() {
    tokio::time::pause();
    let net = start(config(1)).await;
    let base = format!("{}/sim", net.control_url());
    call(
        "PUT",
        format!("{base}/hosts/0/faults"),
        Some(json!({"refuse_connections": true})),
    )
    .await;
    let err = http()
        .get(format!("{}/v1/versions", net.hosts()[0].url))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, SendRequestError::Connect(_)), "{err:?}");
    let (_, hosts) = call("GET", format!("{base}/hosts"), None).await;
    assert_eq!(hosts[0]["up"], false);
    call("DELETE", format!("{base}/hosts/0/faults"), None).await;
    let resp = http()
        .get(format!("{}/v1/versions", net.hosts()[0].url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[actix_rt::test]
async fn latency_escrow_and_session_views() {
    tokio::time::pause();
    let net = start(config(2)).await;
    let base = format!("{}/sim", net.control_url());
    let latency =
        json!({"rtt_ms": 100, "receipt_ms": 50, "ttft_ms": 10, "tokens_per_s": 0.0, "jitter": 0.0});
    let (status, entry) = call("PUT", format!("{base}/hosts/1/latency"), Some(latency)).await;
    assert_eq!(status, 200);
    assert_eq!(entry["latency"]["rtt_ms"], 100);
    let (status, _) = call(
        "PUT",
        format!("{base}/hosts/1/latency"),
        Some(json!({"rt_ms": 1})),
    )
    .await;
    assert_eq!(status, 400);
    let mut s = Session::new(&net, "42");
    let t = tokio::time::Instant::now();
    let (_, out) = s.infer(vec![], br#"{"stream":true}"#).await;
    assert_eq!(out.status, 200);
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    let (_, escrow) = call("GET", format!("{base}/escrows/42"), None).await;
    assert_eq!(escrow["creator"], net.gateway_key().address().as_str());
    assert_eq!(escrow["session_config"]["fee_per_nonce"], 1000);
    let (_, view) = call("GET", format!("{base}/hosts/1/sessions/42"), None).await;
    assert_eq!(view["latest_nonce"], 1);
    assert_eq!(view["state_root"], hex::encode(s.sm.state_root()));
    assert_eq!(view["phase"], "active");
    let (status, _) = call("GET", format!("{base}/hosts/0/sessions/42"), None).await;
    assert_eq!(status, 404);
}

/// A host restarted empty (`forget_session`) no longer has the session, and the control API
/// still says what it held (the chaos runner's payout check of a settled escrow).
#[actix_rt::test]
async fn a_host_restarted_empty_keeps_what_it_held_for_the_payout_check() {
    tokio::time::pause();
    let net = start(config(2)).await;
    let base = format!("{}/sim", net.control_url());
    let mut s = Session::new(&net, "42");
    let (_, out) = s.infer(vec![], br#"{"stream":false}"#).await;
    assert_eq!(out.status, 200);
    let (_, live) = call("GET", format!("{base}/hosts/1/sessions/42"), None).await;
    assert_eq!(live["latest_nonce"], 1);
    let (status, _) = call("GET", format!("{base}/hosts/1/forgotten/42"), None).await;
    assert_eq!(status, 404, "nothing forgotten yet");
    let restart = json!({"forget_session": true});
    let (status, _) = call("PUT", format!("{base}/hosts/1/faults"), Some(restart)).await;
    assert_eq!(status, 200);
    let (status, _) = call("GET", format!("{base}/hosts/1/sessions/42"), None).await;
    assert_eq!(status, 404, "the session is gone");
    let (status, held) = call("GET", format!("{base}/hosts/1/forgotten/42"), None).await;
    assert_eq!(status, 200);
    assert_eq!(held["latest_nonce"], 1);
    assert_eq!(held["forked_at"], Value::Null);
    assert_eq!(held["host_costs"], live["host_costs"]);
}
