//! One host's sessions lock, held as a long catch-up holds it, must not hold the other hosts.

use std::{sync::mpsc, time::Duration};

use devshard_actors::clock::TokioClock;

use crate::sim::{Profile, SimConfig, SimNetwork, DEFAULT_ROUTE_PREFIX};

/// How long the lock's holder waits for the other host's answer before it gives up (only a
/// failing run waits that long).
const HOLD_BOUND: Duration = Duration::from_secs(20);

async fn get_status(url: String) -> u16 {
    let client = awc::Client::builder().disable_timeout().finish();
    match client.get(url).send().await {
        Ok(resp) => resp.status().as_u16(),
        Err(e) => panic!("GET failed: {e}"),
    }
}

/// Chaos, invariant 3 (the probe after the last clear of `e9cc4bc`'s seed): both attempts, on
/// healthy hosts, were answered in the same millisecond 6.5 s late, right after a vote's sync
/// of a far verifier ended. That sync held the far host's lock, and a request to that host took
/// the same lock on the one runtime thread every simulated host shares, so it held them all.
#[actix_rt::test]
async fn e9cc4bc_a_host_busy_applying_a_catch_up_holds_no_other_host() {
    let mut cfg = SimConfig::with_seed("sessions-lock");
    cfg.hosts = 2;
    cfg.profile = Profile::Zero;
    let net = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let busy = std::sync::Arc::clone(net.host(0).unwrap());
    let path = format!("{DEFAULT_ROUTE_PREFIX}/sessions/7/mempool");
    let (url0, url1) = (
        format!("{}{path}", net.hosts()[0].url),
        format!("{}{path}", net.hosts()[1].url),
    );

    let (held_tx, held_rx) = mpsc::channel();
    let (answered_tx, answered_rx) = mpsc::channel::<()>();
    let holder = {
        let busy = std::sync::Arc::clone(&busy);
        std::thread::spawn(move || {
            let _catching_up = busy.sessions();
            held_tx.send(()).unwrap();
            answered_rx.recv_timeout(HOLD_BOUND).is_ok()
        })
    };
    held_rx.recv().unwrap();

    let waiting = actix_rt::spawn(get_status(url0));
    // Host 0's handler has counted the request and goes straight on to the session.
    while busy.counters.snapshot().mempool == 0 {
        actix_rt::task::yield_now().await;
    }
    for _ in 0..10 {
        actix_rt::task::yield_now().await;
    }
    assert_eq!(get_status(url1).await, 404, "host 1 answers: no session");
    let control = format!("{}/sim/hosts/0", net.control_url());
    assert_eq!(
        get_status(control).await,
        200,
        "host 0's faults and latency are apart"
    );
    let _ = answered_tx.send(());
    assert!(
        holder.join().unwrap(),
        "host 1 answered only once host 0's sessions lock was released"
    );
    assert_eq!(waiting.await.unwrap(), 404, "host 0 answers after the lock");
}
