//! Kill -9 while 50 requests stream, restart, and check: the escrow resumes at its next nonce,
//! hosts accept it (catch-up works), no nonce was reused, and the diff log is intact. Repeated at
//! five different moments, on the same data directory.

use std::{sync::Arc, time::Duration};

use devshard_actors::{clock::TokioClock, escrow::Session, store::Store};
use devshard_gateway::{
    sim::{Profile, SimConfig, SimNetwork},
    store::SqliteStore,
};

use super::child::{chat_counted, free_port, temp_dir, Gateway, Progress};

/// When the gateway is killed: after this many of the 50 requests got their response headers
/// (streams started) and this many completed.
const MOMENTS: [(usize, usize); 5] = [(0, 0), (10, 0), (45, 0), (50, 10), (50, 40)];

pub(crate) async fn check_lockstep(gw: &Gateway, sim: &SimNetwork) -> u64 {
    let synced = gw.admin("POST", "/v1/admin/escrows/42/sync").await;
    let nonce = synced["nonce"].as_u64().unwrap();
    let root = synced["state_root"].as_str().unwrap().to_string();
    for i in 0..sim.hosts().len() {
        let view = sim.host_view(i, "42").expect("host session");
        assert_eq!(
            view.latest_nonce, nonce,
            "host {i} at the gateway's nonce after sync: {synced}"
        );
        assert_eq!(
            hex::encode(view.state_root),
            root,
            "host {i} at the gateway's root (no nonce reuse)"
        );
    }
    nonce
}

#[actix_rt::test]
async fn sigkill_while_streaming_loses_and_reuses_no_nonce() {
    let mut cfg = SimConfig::with_seed("crash");
    cfg.hosts = 5;
    cfg.profile = Profile::Default;
    cfg.output_tokens = 16;
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let dir = temp_dir("crash");
    let port = free_port();
    let mut last_nonce = 0;
    for (round, (started, completed)) in MOMENTS.iter().copied().enumerate() {
        let mut gw = Gateway::start(&sim, &dir, port, &["42"]).await;
        let nonce_at_start = gw.admin("GET", "/v1/admin/escrows/42").await["snapshot"]["nonce"]
            .as_u64()
            .unwrap();
        assert!(
            nonce_at_start >= last_nonce,
            "round {round}: resumed at {nonce_at_start}, had {last_nonce}"
        );
        // 50 streaming requests in flight; the gateway is killed at the chosen moment.
        let url = gw.url.clone();
        let progress = Progress::default();
        let p = progress.clone();
        let in_flight = tokio::task::spawn_local(async move {
            let requests = (0..50).map(|i| {
                let (url, p) = (url.clone(), p.clone());
                async move { chat_counted(&url, &format!("round {round} request {i}"), p).await }
            });
            futures::future::join_all(requests).await
        });
        for _ in 0..2_000 {
            if progress.headers.get() >= started && progress.done.get() >= completed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        gw.kill9();
        let results = in_flight.await.unwrap();
        let served = results.iter().filter(|r| r.is_ok()).count();
        eprintln!("round {round}: killed after {started} streams started / {completed} done; {served}/50 complete");
        // Restart on the same data directory and keep serving.
        let gw = Gateway::start(&sim, &dir, port, &["42"]).await;
        for i in 0..5 {
            let r = gw
                .chat(&format!("after crash {round}.{i}"), i % 2 == 0)
                .await;
            assert!(
                r.is_ok(),
                "round {round}: request after restart failed: {r:?}"
            );
        }
        last_nonce = check_lockstep(&gw, &sim).await;
        drop(gw);
    }
    // The diff log is contiguous and replays to every stored root.
    let store = SqliteStore::open(dir.join("gateway.db")).unwrap();
    let log = store.load_diffs("42").unwrap();
    assert_eq!(log.len() as u64, last_nonce, "one diff per nonce");
    for (i, d) in log.iter().enumerate() {
        assert_eq!(d.nonce, i as u64 + 1, "contiguous from 1");
    }
    let info: devshard_actors::escrow::EscrowInfo =
        serde_json::from_value(store.get("escrow", "42").unwrap().unwrap()).unwrap();
    let warm = store.load_warm_deltas("42").unwrap();
    Session::restore(Arc::new(info), log, &warm).expect("the log replays to its own roots");
    let _ = std::fs::remove_dir_all(&dir);
}
