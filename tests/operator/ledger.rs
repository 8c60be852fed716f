//! The durable cost ledger: a row per request and per attempt written when the request ends,
//! costs completed from the escrow's diff log when the nonces settle (finished, or timed out by
//! vote — the loser of a fail-over included), equal to what the hosts' own state machines say;
//! `GET /v1/requests/{id}` for the admin or the key that made it; the export; rows on disk.

use std::time::{Duration, Instant};

use devshard_actors::protocol::state::SessionConfig;
use devshard_gateway::{
    sim::{Faults, Profile, SimConfig},
    store::{
        ledger::{AttemptRow, LedgerStore, RequestRow, Settlement},
        SqliteStore,
    },
};
use serde_json::Value;

use crate::live::{self, client, request_id, ADMIN};

const KEY_A: &str = "key-a-secret";
const KEY_B: &str = "key-b-secret";

async fn chat_as(url: &str, key: &str, body: &str) -> (u16, awc::http::header::HeaderMap) {
    let mut resp = client(4)
        .post(format!("{url}/v1/chat/completions"))
        .insert_header(("Authorization", format!("Bearer {key}")))
        .insert_header(("Content-Type", "application/json"))
        .send_body(body.to_string())
        .await
        .unwrap();
    let _ = resp.body().limit(1 << 20).await.unwrap();
    (resp.status().as_u16(), resp.headers().clone())
}

async fn get_as(url: &str, path: &str, key: Option<&str>) -> (u16, String) {
    let mut req = client(4).get(format!("{url}{path}"));
    if let Some(k) = key {
        req = req.insert_header(("Authorization", format!("Bearer {k}")));
    }
    let mut resp = req.send().await.unwrap();
    let body = resp.body().limit(16 << 20).await.unwrap();
    (
        resp.status().as_u16(),
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// The request's ledger row once every nonce settled (polls the settlement tail, bounded).
async fn settled(url: &str, rid: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, body) = get_as(url, &format!("/v1/requests/{rid}"), Some(ADMIN)).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        if v["ledger"]["settled_ms"].is_i64() {
            return v["ledger"].clone();
        }
        assert!(Instant::now() < deadline, "not settled in time: {v}");
        // A background thread settles: poll it (a bounded wait, not a synchronisation).
        actix_rt::time::sleep(Duration::from_millis(100)).await;
        let _ = client(2)
            .post(format!("{url}/v1/admin/escrows/42/sync"))
            .insert_header(("Authorization", format!("Bearer {ADMIN}")))
            .send()
            .await;
    }
}

#[actix_rt::test]
async fn costs_settle_from_the_diff_log_and_match_the_hosts() {
    let mut cfg = SimConfig::with_seed("ledger");
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    let mut session = SessionConfig::default_for_group(3);
    session.refusal_timeout = 2;
    cfg.session_config = Some(session);
    let keys = format!("{KEY_A},{KEY_B}");
    let l = live::start_with(cfg, &[("DEVSHARD_API_KEYS", keys.as_str())], |c| {
        c.ledger.settle_interval_ms = 50;
    })
    .await;
    let url = l.url().to_string();
    // Nonce 1 → host 1, which refuses: the request fails over to nonce 2 (host 2).
    l.sim
        .set_faults(
            1,
            Faults {
                refuse_connections: true,
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    let (status, a) = chat_as(
        &url,
        KEY_A,
        r#"{"messages":[{"role":"user","content":"a"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, b) = chat_as(
        &url,
        KEY_B,
        r#"{"stream":true,"messages":[{"role":"user","content":"b"}]}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (a, b) = (request_id(&a), request_id(&b));

    let row = settled(&url, &a).await;
    let attempts = row["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{row}");
    let (loser, winner) = (&attempts[0], &attempts[1]);
    assert_eq!(loser["result"], "failed");
    assert_eq!(
        loser["inference"], "timed_out",
        "the loser settled by a timeout vote: {row}"
    );
    assert_eq!(loser["actual_cost"], 0);
    assert_eq!(winner["inference"], "finished");
    let fee = winner["fee"].as_u64().unwrap();
    assert_eq!(
        loser["cost"].as_u64(),
        Some(fee),
        "a timed-out attempt costs the per-nonce fee"
    );
    // The hosts' own state machines agree on every figure.
    let nonce = winner["nonce"].as_u64().unwrap();
    let host = l.sim.host_view((nonce % 3) as usize, "42").unwrap();
    let rec = host.state.record(nonce).unwrap();
    assert_eq!(winner["actual_cost"].as_u64(), Some(rec.actual_cost));
    assert_eq!(winner["reserved_cost"].as_u64(), Some(rec.reserved_cost));
    assert_eq!(row["winner_nonce"].as_u64(), Some(nonce));
    assert_eq!(row["actual_cost"].as_u64(), Some(rec.actual_cost));
    assert_eq!(row["input_tokens"].as_u64(), Some(rec.input_tokens));
    assert_eq!(row["output_tokens"].as_u64(), Some(rec.output_tokens));
    assert_eq!(row["total_cost"].as_u64(), Some(rec.actual_cost + 2 * fee));
    assert!(row["api_key_id"].as_str().unwrap().starts_with("key_"));
    let row_b = settled(&url, &b).await;
    assert_eq!(row_b["stream"], true);
    assert_ne!(row_b["api_key_id"], row["api_key_id"]);

    // Who may read a request.
    let path = format!("/v1/requests/{b}");
    assert_eq!(
        get_as(&url, &path, Some(KEY_B)).await.0,
        200,
        "the key that made it"
    );
    assert_eq!(get_as(&url, &path, Some(KEY_A)).await.0, 404, "another key");
    assert_eq!(get_as(&url, &path, None).await.0, 401);
    assert_eq!(get_as(&url, &path, Some("nope")).await.0, 401);

    // The export: every request, no key in it.
    let (status, jsonl) = get_as(&url, "/v1/admin/ledger?format=jsonl", Some(ADMIN)).await;
    assert_eq!(status, 200);
    let lines: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{jsonl}");
    assert_eq!(lines[0]["request_id"], a.as_str());
    let (_, csv) = get_as(&url, "/v1/admin/ledger?format=csv", Some(ADMIN)).await;
    let csv: Vec<&str> = csv.lines().collect();
    assert!(
        csv[0].starts_with("request_id,started_ms,ended_ms,model"),
        "{csv:?}"
    );
    assert_eq!(csv.len(), 3);
    assert!(csv[1].starts_with(&format!("{a},")) && csv[1].contains(&format!("{nonce}:")));
    assert!(
        !jsonl.contains(KEY_A) && !csv.concat().contains(KEY_B),
        "keys never stored"
    );
    let since = lines[1]["ended_ms"].as_i64().unwrap();
    let (_, only_b) = get_as(
        &url,
        &format!("/v1/admin/ledger?since={since}"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(only_b.lines().count(), 1);
    assert_eq!(
        get_as(&url, "/v1/admin/ledger?format=xml", Some(ADMIN))
            .await
            .0,
        400
    );
    assert_eq!(get_as(&url, "/v1/admin/ledger", Some(KEY_A)).await.0, 401);
    l.stop().await;
}

fn attempt(nonce: u64) -> AttemptRow {
    AttemptRow {
        nonce,
        host: "gonka1h".into(),
        role: "primary".into(),
        result: "won".into(),
        inference: None,
        input_tokens: None,
        output_tokens: None,
        reserved_cost: None,
        actual_cost: None,
        fee: None,
        cost: None,
        settled_ms: None,
    }
}

#[test]
fn rows_survive_a_restart_and_retention_deletes_old_ones() {
    let dir = std::env::temp_dir().join(format!("devshard-ledger-{}", std::process::id()));
    let path = dir.join("gateway.db");
    let row = |id: &str, ended_ms: i64, nonce: u64| RequestRow {
        request_id: id.into(),
        started_ms: ended_ms - 5,
        ended_ms,
        model: "m".into(),
        escrow_id: "42".into(),
        api_key_id: "key_0123".into(),
        stream: false,
        outcome: "completed".into(),
        status: 200,
        winner_nonce: Some(nonce),
        input_tokens: None,
        output_tokens: None,
        reserved_cost: None,
        actual_cost: None,
        total_cost: None,
        settled_ms: None,
        attempts: vec![attempt(nonce)],
    };
    {
        let store = SqliteStore::open(&path).unwrap();
        let ledger = LedgerStore::open(&path).unwrap();
        ledger.insert(row("old", 1_000, 1));
        ledger.insert(row("new", 9_000, 2));
        ledger.settle(vec![Settlement {
            escrow_id: "42".into(),
            nonce: 2,
            inference: "finished".into(),
            input_tokens: 3,
            output_tokens: 4,
            reserved_cost: 70,
            actual_cost: 14,
            fee: 5,
            settled_ms: 9_500,
        }]);
        ledger.close();
        store.close().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let ledger = LedgerStore::open(&path).unwrap();
    let new = ledger.get("new").unwrap().expect("survived the restart");
    assert_eq!(
        (new.actual_cost, new.total_cost, new.settled_ms),
        (Some(14), Some(19), Some(9_500))
    );
    assert_eq!(new.attempts[0].cost, Some(19));
    assert_eq!(
        ledger.get("old").unwrap().unwrap().settled_ms,
        None,
        "unsettled until its nonce"
    );
    assert_eq!(ledger.unsettled().unwrap(), vec![("42".to_string(), 1)]);
    ledger.prune(5_000);
    ledger.flush();
    assert!(ledger.get("old").unwrap().is_none(), "retention deleted it");
    assert_eq!(ledger.page(0, i64::MAX, None, 10).unwrap().len(), 1);
    ledger.close();
    store.close().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
