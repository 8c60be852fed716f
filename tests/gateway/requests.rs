//! `GET /v1/requests/{request_id}` through the real HTTP server: a request's record lists the
//! nonces its race consumed (exactly what the escrow's nonce moved by) and every attempt, with
//! its host, role, timing and result.

use std::time::{Duration, Instant};

use devshard_gateway::sim::Faults;
use serde_json::Value;

use crate::live::{self, admin_get, chat, escrow_nonce, request_id};

const WHOLE: &str = r#"{"max_tokens":8,"messages":[{"role":"user","content":"fail over"}]}"#;
const STREAM: &str =
    r#"{"stream":true,"max_tokens":8,"messages":[{"role":"user","content":"one"}]}"#;

/// The record of `rid` once its race has reported (the race outlives the answer by its finish
/// marker drain).
async fn record_after_race(url: &str, rid: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, rec) = admin_get(url, &format!("/v1/requests/{rid}")).await;
        assert_eq!(status, 200, "{rec}");
        if rec["race_ended_at_ms"].is_i64() {
            return rec;
        }
        assert!(Instant::now() < deadline, "the race never reported: {rec}");
        tokio::task::yield_now().await;
    }
}

fn nonces(rec: &Value) -> Vec<u64> {
    rec["nonces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect()
}

#[actix_rt::test]
async fn a_request_record_lists_the_nonces_the_escrow_consumed_and_every_attempt() {
    let l = live::start("requests", 3, &[], |_| {}).await;
    let url = l.url().to_string();
    // Nonce 1 goes to host 1, which refuses connections: the request fails over to host 2.
    l.sim
        .set_faults(
            1,
            Faults {
                refuse_connections: true,
                ..Default::default()
            },
        )
        .unwrap();
    let before = escrow_nonce(&url).await;
    let (status, headers, body) = chat(&url, WHOLE).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let rec = record_after_race(&url, &request_id(&headers)).await;
    let after = escrow_nonce(&url).await;
    assert_eq!(
        nonces(&rec),
        ((before + 1)..=after).collect::<Vec<_>>(),
        "{rec}"
    );
    assert_eq!(after - before, 2, "one failed attempt, one answer: {rec}");
    let attempts = rec["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{rec}");
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!(first["host"], l.sim.hosts()[1].address.to_string());
    assert_eq!(
        (&first["role"], &first["result"]),
        (&"primary".into(), &"failed".into())
    );
    assert!(first["error"].as_str().is_some(), "{first}");
    assert_eq!(
        (&second["role"], &second["result"]),
        (&"retry".into(), &"won".into())
    );
    assert_ne!(first["host"], second["host"]);
    assert_ne!(first["nonce"], second["nonce"]);
    assert!(second["start_offset_ms"].as_i64().unwrap() >= 0);
    assert!(second["duration_ms"].as_i64().unwrap() >= 0);

    // A plain streamed request: one nonce, one attempt, won.
    l.sim.clear_faults(1).unwrap();
    let before = escrow_nonce(&url).await;
    let (status, headers, _) = chat(&url, STREAM).await;
    assert_eq!(status, 200);
    let rec = record_after_race(&url, &request_id(&headers)).await;
    let after = escrow_nonce(&url).await;
    assert_eq!(nonces(&rec), vec![after], "{rec}");
    assert_eq!(after, before + 1);
    let attempts = rec["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{rec}");
    assert_eq!(attempts[0]["result"], "won");
    assert_eq!(attempts[0]["nonce"], after);
    assert_eq!(rec["outcome"]["state"], "completed", "{rec}");
    l.stop().await;
}
