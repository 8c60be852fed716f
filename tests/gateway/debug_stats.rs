//! `GET /v1/debug/actors` through the real HTTP server: every actor kind shows its mailbox depth,
//! message counts, last message time and armed timers; a stuck actor is still listed at once,
//! with a growing mailbox, and reported `unresponsive`.

use std::time::{Duration, Instant};

use devshard_actors::{
    directory::{ActorKind, GetEscrow, InjectStallInto},
    escrow::messages::GetSnapshot,
};
use devshard_gateway::sim::Faults;
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::live::{self, actors, chat, Live};

const STREAM: &str = r#"{"stream":true,"max_tokens":8,"messages":[{"role":"user","content":"s"}]}"#;

fn of_kind<'a>(all: &'a [Value], kind: &str) -> Vec<&'a Value> {
    all.iter().filter(|a| a["kind"] == kind).collect()
}

fn timer<'a>(entry: &'a Value, name: &str) -> Option<&'a Value> {
    entry["timers"]
        .as_array()?
        .iter()
        .find(|t| t["name"].as_str().is_some_and(|n| n.starts_with(name)))
}

/// Opens a streaming request and keeps it open (after its first chunk) until the returned
/// sender is dropped.
async fn hold_stream(url: &str) -> oneshot::Sender<()> {
    let (first_tx, first_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let url = url.to_string();
    actix_rt::spawn(async move {
        let mut resp = live::client(4)
            .post(format!("{url}/v1/chat/completions"))
            .insert_header(("Content-Type", "application/json"))
            .send_body(STREAM)
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let first = resp.next().await;
        assert!(matches!(first, Some(Ok(_))), "{first:?}");
        let _ = first_tx.send(());
        let _ = release_rx.await;
        drop(resp);
    });
    first_rx.await.unwrap();
    release_tx
}

async fn escrow_handled(l: &Live) -> u64 {
    let all = actors(l.url(), "?kind=escrow").await;
    all[0]["messages_handled"].as_u64().unwrap()
}

#[actix_rt::test]
async fn every_actor_kind_shows_its_mailbox_messages_and_timers() {
    let l = live::start("debug-stats", 3, &[], |_| {}).await;
    // Nonce 1 → host 1 lies about its state once: a repair actor starts.
    l.sim
        .set_faults(
            1,
            Faults {
                wrong_state_hash: true,
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(chat(l.url(), STREAM).await.0, 200);
    // Host 1 (now withheld) never shows a signature: its repair keeps ticking.
    l.sim
        .set_faults(
            1,
            Faults {
                signatures_empty: true,
                ..Default::default()
            },
        )
        .unwrap();
    let handled_before = escrow_handled(&l).await;
    // The other hosts stream one chunk, then hold the stream: a race stays in flight.
    for i in [0, 2] {
        let hold = Faults {
            stall_after_chunks: Some(1),
            stall_ms: Some(600_000),
            ..Default::default()
        };
        l.sim.set_faults(i, hold).unwrap();
    }
    let release = hold_stream(l.url()).await;
    let all = actors(l.url(), "").await;
    for kind in [
        "directory",
        "escrow",
        "participant",
        "race",
        "repair",
        "chain_poller",
    ] {
        let listed = of_kind(&all, kind);
        assert!(!listed.is_empty(), "{kind} listed: {all:?}");
        for a in listed {
            assert!(a["mailbox_depth"].is_u64(), "{a}");
            assert!(a["messages_enqueued"].is_u64(), "{a}");
            assert!(a["messages_handled"].is_u64(), "{a}");
            assert!(a["started_at"].is_i64(), "{a}");
            assert!(a.get("last_message_at").is_some(), "{a}");
            assert!(a["timers"].is_array(), "{a}");
        }
    }
    let directory = of_kind(&all, "directory")[0];
    assert!(directory["messages_handled"].as_u64().unwrap() > 0);
    assert!(directory["last_message_at"].is_i64());
    assert!(directory["races_in_flight"].as_u64().unwrap() >= 1);

    let escrow = of_kind(&all, "escrow")[0];
    assert!(
        escrow["messages_handled"].as_u64().unwrap() > handled_before,
        "the held request's messages were handled: {escrow}"
    );
    let sync = timer(escrow, "sync_persist").expect("escrow sync-persist interval");
    assert!(sync["due_at"].as_i64().unwrap() > escrow["started_at"].as_i64().unwrap());
    assert!(sync["due_in_ms"].as_i64().unwrap() <= 1_000, "{sync}");

    let repair = of_kind(&all, "repair")[0];
    let tick = timer(repair, "repair_tick").expect("the repair's next tick");
    assert!(tick["due_in_ms"].as_i64().unwrap() <= 360_000, "{tick}");
    assert!(repair["id"].as_str().unwrap().starts_with("42/"));

    let race = of_kind(&all, "race")[0];
    assert!(timer(race, "client_check").is_some(), "{race}");
    assert_eq!(race["detail"]["escrow"], "42");
    assert!(race["detail"]["request_id"].as_str().is_some());
    assert!(race["messages_handled"].as_u64().unwrap() > 0, "{race}");
    // One race in full: its attempts with timings, and the hedge decision.
    let path = format!("/v1/debug/actors/race/{}", race["id"].as_str().unwrap());
    let (status, one) = live::admin_get(l.url(), &path).await;
    assert_eq!(status, 200, "{one}");
    let detail = &one["detail"];
    assert_eq!(detail["escrow_id"], "42", "{one}");
    assert_eq!(detail["request_id"], race["detail"]["request_id"], "{one}");
    let attempt = &detail["attempts"][0];
    assert_eq!(attempt["role"], "primary", "{one}");
    assert!(attempt["nonce"].as_u64().unwrap() >= 2, "{one}");
    assert!(
        attempt["host"].as_str().unwrap().starts_with("gonka1"),
        "{one}"
    );
    assert!(attempt["start_offset_ms"].is_i64(), "{one}");
    assert!(
        attempt["first_content_ms"].is_i64(),
        "content arrived: {one}"
    );
    assert_eq!(attempt["result"], "running", "{one}");
    assert_eq!(detail["winner"], 0, "{one}");
    let decision = detail["shape"]["decision"].as_str().unwrap();
    assert!(
        [
            "primary_then_hedge_if_slow",
            "hedge_now",
            "pair_with_healthy"
        ]
        .contains(&decision),
        "{one}"
    );
    assert!(
        one["mailbox_depth"].is_u64(),
        "the single view keeps the stats: {one}"
    );
    let (status, _) = live::admin_get(l.url(), "/v1/debug/actors/race/999999").await;
    assert_eq!(status, 404);

    let poller = of_kind(&all, "chain_poller")[0];
    assert!(timer(poller, "housekeeping").is_some(), "{poller}");
    assert!(timer(poller, "poll epochs").is_some(), "{poller}");

    drop(release);
    l.stop().await;
}

#[actix_rt::test]
async fn a_stuck_escrow_is_listed_within_a_second_with_its_growing_mailbox() {
    let l = live::start(
        "debug-stall",
        3,
        &[("DEVSHARD_DEBUG_FAULT_INJECTION", "true")],
        |_| {},
    )
    .await;
    assert_eq!(chat(l.url(), STREAM).await.0, 200);
    let stall = InjectStallInto {
        kind: ActorKind::Escrow,
        id: "42".into(),
        ms: 20_000,
    };
    l.gw.directory.send(stall).await.unwrap().unwrap();
    let escrow =
        l.gw.directory
            .send(GetEscrow {
                escrow_id: "42".into(),
            })
            .await
            .unwrap()
            .unwrap();
    for _ in 0..5 {
        escrow.do_send(GetSnapshot);
    }
    let t0 = Instant::now();
    let all = actors(l.url(), "").await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(1), "listing took {took:?}");
    let first = of_kind(&all, "escrow")[0].clone();
    assert_eq!(first["state"], "unresponsive", "{first}");
    let depth = first["mailbox_depth"].as_u64().unwrap();
    assert!(depth >= 5, "{first}");
    assert!(
        !of_kind(&all, "participant").is_empty(),
        "the others are listed"
    );
    // The listing's own probes wait in the stuck mailbox too: the depth keeps growing.
    let t0 = Instant::now();
    let again = actors(l.url(), "?kind=escrow").await;
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert!(
        again[0]["mailbox_depth"].as_u64().unwrap() > depth,
        "{again:?}"
    );
    l.stop().await;
}
