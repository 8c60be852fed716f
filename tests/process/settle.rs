//! `kill -9` of the real gateway binary at each settlement step (draining, between finalize
//! rounds, collecting, after the broadcast before the commit, after the confirmation), then a
//! restart on the same data directory: every escrow ends settled, the chain saw exactly one
//! settlement tx per escrow, and no nonce was reused: the gateway's durable diff log holds each
//! nonce once, up to the nonce the chain settled, and every host's diff chain is that log.

use std::time::Duration;

use devshard_actors::{clock::TokioClock, store::Store};
use devshard_gateway::{
    sim::{EscrowStatus, Faults, Profile, SimConfig, SimNetwork, TxFaults},
    store::SqliteStore,
};

use super::child::{free_port, temp_dir, Gateway};

async fn settlement(gw: &Gateway, id: &str) -> serde_json::Value {
    gw.admin("GET", &format!("/v1/admin/escrows/{id}/settlement"))
        .await
}

/// Polls until `done` holds for the record (bounded).
async fn wait_for(
    gw: &Gateway,
    id: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    for _ in 0..1200 {
        let r = settlement(gw, id).await;
        if done(&r) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{id} never reached {what}: {}", settlement(gw, id).await);
}

/// Polls until the record's state is one of `states` (bounded).
async fn wait_state(gw: &Gateway, id: &str, states: &[&str]) -> serde_json::Value {
    wait_for(gw, id, &format!("{states:?}"), |r| {
        states.iter().any(|s| r["state"] == *s)
    })
    .await
}

/// Starts one streaming request that stalls after its first chunk (every host stalls); answers
/// the escrow serving it once its 200 head arrived. The stream runs on in a local task.
async fn stalled_stream(gw: &Gateway, sim: &SimNetwork) -> String {
    sim.set_all_faults(Faults {
        stall_after_chunks: Some(1),
        stall_ms: Some(3_000),
        ..Faults::default()
    });
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let body = serde_json::json!({"messages": [{"role": "user", "content": "drain me"}],
        "stream": true, "max_tokens": 24});
    let mut resp = client
        .post(format!("{}/v1/chat/completions", gw.url))
        .send_json(&body)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let escrow = resp
        .headers()
        .get("x-devshard-escrow")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    // The body is read (and cut by the kill) in the background.
    actix_rt::spawn(async move {
        let _ = resp.body().limit(16 << 20).await;
    });
    escrow
}

#[actix_rt::test]
async fn sigkill_at_each_settlement_step_still_settles_once() {
    let escrows = ["42", "43", "44", "45", "46"];
    let mut cfg = SimConfig::with_seed("settle-crash");
    cfg.hosts = 4;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = escrows.map(String::from).to_vec();
    // Short timeouts: the stream cut by the kill while draining is abandoned by its host (no
    // finish), so the drain ends when the attempt is timed out by vote.
    let mut session = devshard_actors::protocol::state::SessionConfig::default_for_group(4);
    session.execution_timeout = 3;
    session.refusal_timeout = 2;
    cfg.session_config = Some(session);
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let dir = temp_dir("settle-crash");
    let port = free_port();
    let mut gw = Gateway::start(&sim, &dir, port, &escrows).await;
    for _ in 0..20 {
        gw.chat("pay the hosts", false).await.unwrap();
    }

    // Killed while draining: a stream of the escrow is still running.
    let draining = stalled_stream(&gw, &sim).await;
    let r = gw
        .admin("POST", &format!("/v1/admin/escrows/{draining}/settle"))
        .await;
    assert_eq!(r["state"], "draining", "{r}");
    gw.kill9();
    sim.clear_all_faults();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;
    let mut rest = escrows.iter().copied().filter(|e| *e != draining);
    let mut next = || rest.next().unwrap();

    // Killed between finalize rounds: the first round (MsgFinalizeRound) is durable and sent,
    // a later round waits on hosts that answer slowly.
    let rounds = next();
    sim.set_all_faults(Faults {
        stall_before_receipt_ms: Some(1_500),
        ..Faults::default()
    });
    gw.admin("POST", &format!("/v1/admin/escrows/{rounds}/settle"))
        .await;
    let r = wait_for(&gw, rounds, "a later finalize round", |r| {
        r["state"] == "finalizing" && r["detail"]["finalize_nonce"].is_u64()
    })
    .await;
    assert!(r["payload"].is_null(), "{r}");
    gw.kill9();
    sim.clear_all_faults();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    // Killed while collecting (2 of 4 hosts give no signature: weight 2 < 3).
    let collecting = next();
    let down = Faults {
        withhold_state_sig: true,
        signatures_empty: true,
        ..Faults::default()
    };
    sim.set_faults(1, down.clone()).unwrap();
    sim.set_faults(2, down).unwrap();
    gw.admin("POST", &format!("/v1/admin/escrows/{collecting}/settle"))
        .await;
    let r = wait_state(&gw, collecting, &["retrying"]).await;
    assert_eq!(r["weight"], 2, "{r}");
    gw.kill9();
    sim.clear_all_faults();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    // Killed after the broadcast, before the commit.
    let broadcast = next();
    sim.set_tx_faults(TxFaults {
        commit_delay_ms: 4_000,
        ..TxFaults::default()
    });
    gw.admin("POST", &format!("/v1/admin/escrows/{broadcast}/settle"))
        .await;
    wait_state(&gw, broadcast, &["broadcast"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.kill9();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    // Killed after the confirmation.
    let confirmed = next();
    gw.admin("POST", &format!("/v1/admin/escrows/{confirmed}/settle"))
        .await;
    wait_state(&gw, confirmed, &["settled"]).await;
    gw.kill9();
    sim.set_tx_faults(TxFaults::default());
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    for id in escrows {
        let r = wait_state(&gw, id, &["settled"]).await;
        assert!(
            matches!(sim.escrow_status(id), Some(EscrowStatus::Settled { .. })),
            "{id}: {r}"
        );
        assert_eq!(
            sim.settlement_tx_hashes(id).len(),
            1,
            "{id}: one tx seen by the chain: {r}"
        );
    }
    gw.kill9();
    drop(gw);
    let store = SqliteStore::open(dir.join("gateway.db")).unwrap();
    for id in escrows {
        no_nonce_reused(&sim, &store, id);
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The gateway's durable log holds nonces 1..=n, each once, with n the nonce the chain settled;
/// every host applied exactly that chain of diffs (a reused nonce would fork a host or leave a
/// host's chain different from the log).
fn no_nonce_reused(sim: &SimNetwork, store: &SqliteStore, id: &str) {
    let log = store.load_diffs(id).unwrap();
    let nonces: Vec<u64> = log.iter().map(|d| d.nonce).collect();
    let expected: Vec<u64> = (1..=log.len() as u64).collect();
    assert_eq!(nonces, expected, "{id}: each nonce once, in order");
    let Some(EscrowStatus::Settled { nonce, .. }) = sim.escrow_status(id) else {
        panic!("{id} is not settled");
    };
    assert_eq!(
        nonce,
        log.len() as u64,
        "{id}: settled at the log's last nonce"
    );
    for host in 0..sim.hosts().len() {
        let view = sim.host_view(host, id).unwrap();
        assert_eq!(view.forked_at, None, "{id}: host {host} forked");
        assert_eq!(view.latest_nonce, nonce, "{id}: host {host}");
        assert!(
            view.diffs == log,
            "{id}: host {host}'s diff chain is the gateway's log"
        );
    }
}
