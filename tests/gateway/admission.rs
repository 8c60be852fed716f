//! Admission by balance (docs/lifecycle.md §4) through the real gateway over HTTP against the
//! simulated network: an escrow whose balance covers exactly three worst-case requests serves
//! exactly three at once; the fourth gets a 503 that says why, and, once another escrow is
//! registered, goes there.

use devshard_actors::{
    directory::pick::reserved_cost,
    protocol::state::{SessionConfig, DEFAULT_CREATE_DEVSHARD_FEE},
};
use devshard_gateway::sim::{LatencyProfile, Profile, SimConfig};

use crate::live::{self, admin_post, chat};

const MAX_TOKENS: u64 = 200;
/// Bytes the gateway's normalized body may exceed the client's by (checked below against what
/// the host recorded).
const BODY_SLACK: u64 = 200;

fn body(i: usize) -> String {
    format!(
        r#"{{"max_tokens":{MAX_TOKENS},"messages":[{{"role":"user","content":"pay for me {i}"}}]}}"#
    )
}

#[actix_rt::test]
async fn an_escrow_that_covers_three_worst_case_requests_serves_exactly_three() {
    let price = SessionConfig::default_for_group(3);
    let worst_body = body(0).len() as u64 + BODY_SLACK;
    let worst = reserved_cost(
        worst_body,
        MAX_TOKENS,
        price.token_price,
        price.fee_per_nonce,
    );
    let mut cfg = SimConfig::with_seed("admission");
    cfg.hosts = 3;
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    cfg.amount = 3 * worst + DEFAULT_CREATE_DEVSHARD_FEE;
    // Slow first token: the four requests are all in flight at once.
    cfg.profile = Profile::Custom(vec![LatencyProfile {
        ttft_ms: 3_000,
        tokens_per_s: 0.0,
        ..LatencyProfile::zero()
    }]);
    let l = live::start_with(cfg, &[], |c| c.settlement.auto_settle = false).await;
    let url = l.url().to_string();

    let bodies: Vec<String> = (0..4).map(body).collect();
    let calls: Vec<_> = bodies.iter().map(|b| Box::pin(chat(&url, b))).collect();
    // The refused request answers at once; the three paid for wait for their first token.
    let ((status, headers, refused), _, running) = futures::future::select_all(calls).await;
    assert_eq!(status, 503);
    assert_eq!(headers.get("retry-after").unwrap(), "30");
    let refused: serde_json::Value = serde_json::from_slice(&refused).unwrap();
    let model = l.sim.config().model.clone();
    assert_eq!(
        refused["error"]["message"],
        format!("all escrows for model {model} are out of balance; rotation is off")
    );
    assert_eq!(refused["error"]["code"], "no_escrow_available");
    let mut m = live::client(2)
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap();
    let metrics = String::from_utf8_lossy(&m.body().await.unwrap()).to_string();
    assert!(
        metrics.contains(r#"devshard_escrow_pick_refusals_total{reason="out_of_balance"} 1"#),
        "{metrics}"
    );

    // Another escrow registered while the three run: the next request goes there.
    let (status, v) = admin_post(&url, "/v1/admin/escrows", r#"{"escrow_id":"43"}"#).await;
    assert_eq!(status, 201, "{v}");
    let (status, headers, _) = chat(&url, &body(5)).await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("x-devshard-escrow").unwrap(), "43");

    let served = futures::future::join_all(running).await;
    for (status, headers, _) in &served {
        assert_eq!(*status, 200);
        assert_eq!(headers.get("x-devshard-escrow").unwrap(), "42");
    }
    assert_eq!(served.len(), 3, "exactly three are paid for");
    // The reserve assumed above covers what the hosts were really sent.
    let view = l.sim.host_view(0, "42").unwrap();
    let rec = (1..=3).find_map(|n| view.state.record(n)).unwrap();
    assert!(rec.input_length <= worst_body, "{} bytes", rec.input_length);
    l.stop().await;
}
