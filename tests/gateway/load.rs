//! Acceptance (issue 6): under 200 concurrent streaming requests, `GET /v1/debug/actors`
//! answers in under 1 s and lists the races in flight.
//!
//! Every simulated host streams one content chunk and then holds the stream open, so all 200
//! races stay in flight (crowned, streaming) while the listing is measured. The wall-clock
//! measurement is the acceptance criterion itself, so it uses real time.

use std::time::{Duration, Instant};

use devshard_gateway::sim::Faults;
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::live::{self, actors};

const STREAMS: usize = 200;

#[actix_rt::test]
async fn under_200_streams_the_actor_listing_answers_within_a_second_and_lists_the_races() {
    // One HTTP worker: all 200 streams, their host connections and the listing share a thread.
    let l = live::start("load-200", 3, &[("DEVSHARD_WORKERS", "1")], |c| {
        c.race.stall_timeout = Duration::from_secs(600);
        c.race.receipt_timeout = Duration::from_secs(120);
        // All 200 arrive at once and start at the speed of a debug build on a shared machine:
        // queue them all for as long as that takes (shedding is `tests/edge/overload.rs`).
        c.overload.queue_timeout_ms = 120_000;
    })
    .await;
    l.sim.set_all_faults(Faults {
        stall_after_chunks: Some(1),
        stall_ms: Some(600_000),
        ..Default::default()
    });
    let client = live::client(STREAMS + 16);
    let (started_tx, mut started) = mpsc::unbounded_channel::<Result<(), String>>();
    let (release_tx, release) = watch::channel(false);
    for i in 0..STREAMS {
        let (client, url) = (client.clone(), l.url().to_string());
        let (started_tx, mut release) = (started_tx.clone(), release.clone());
        actix_rt::spawn(async move {
            let body = format!(
                r#"{{"stream":true,"max_tokens":8,"messages":[{{"role":"user","content":"load {i}"}}]}}"#
            );
            let sent = client
                .post(format!("{url}/v1/chat/completions"))
                .insert_header(("Content-Type", "application/json"))
                .send_body(body)
                .await;
            let mut resp = match sent {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    let _ = started_tx.send(Err(format!("status {}", r.status())));
                    return;
                }
                Err(e) => {
                    let _ = started_tx.send(Err(e.to_string()));
                    return;
                }
            };
            match resp.next().await {
                Some(Ok(_)) => {
                    let _ = started_tx.send(Ok(()));
                    // Hold the stream open until the test is done.
                    let _ = release.changed().await;
                }
                other => {
                    let _ = started_tx.send(Err(format!("no first chunk: {other:?}")));
                }
            }
        });
    }
    drop(started_tx);
    let mut streaming = 0;
    let mut failures = Vec::new();
    let wait = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(r) = started.recv().await {
            match r {
                Ok(()) => streaming += 1,
                Err(e) => failures.push(e),
            }
            if streaming + failures.len() == STREAMS {
                break;
            }
        }
    })
    .await;
    assert!(wait.is_ok(), "{streaming} streams started, {failures:?}");
    assert!(
        streaming >= STREAMS * 95 / 100,
        "{streaming} streaming, failures: {failures:?}"
    );

    let t0 = Instant::now();
    let all = actors(l.url(), "").await;
    let took = t0.elapsed();
    let races = all.iter().filter(|a| a["kind"] == "race").count();
    eprintln!("{streaming} streams in flight; the listing took {took:?} and lists {races} races");
    assert!(took < Duration::from_secs(1), "listing took {took:?}");
    assert!(
        races >= streaming,
        "{races} races listed for {streaming} streams"
    );
    let race = all.iter().find(|a| a["kind"] == "race").unwrap();
    assert!(race["mailbox_depth"].is_u64() && race["timers"].is_array());

    let _ = release_tx.send(true);
    l.stop().await;
}
