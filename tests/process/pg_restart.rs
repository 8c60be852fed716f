//! PostgreSQL restarts under a real `devshard-gateway serve` on steady load (a throwaway cluster
//! of this test, `pg_ctl stop -m fast` then `start`): while the database is down the gateway
//! fails closed with 503 + `Retry-After`; once it is back the same process serves again by itself
//! within a bounded time; no nonce is lost or reused (the hosts' chains agree with the gateway's
//! log, which is contiguous and replays to its roots).

use std::{
    cell::{Cell, RefCell},
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use devshard_actors::{clock::TokioClock, escrow::Session, store::Store};
use devshard_gateway::{
    sim::{Profile, SimConfig, SimNetwork},
    store::postgres::{PgStore, ReplicaConfig},
};

use super::{
    child::{free_port, temp_dir, Gateway},
    crash::check_lockstep,
};
use crate::pgdb::Cluster;

/// Bound on every wait of the test (a hang hits it; a slow machine does not).
const DEADLINE: Duration = Duration::from_secs(60);
const WORKERS: usize = 6;

/// One answer: the load phase it was sent in, its status, whether it carried `Retry-After`.
#[derive(Debug, Clone, Copy)]
struct Answer {
    phase: u8,
    status: u16,
    retry_after: bool,
}

#[derive(Clone, Default)]
struct Load {
    phase: Rc<Cell<u8>>,
    stop: Rc<Cell<bool>>,
    answers: Rc<RefCell<Vec<Answer>>>,
}

impl Load {
    fn count(&self, phase: u8, ok: bool) -> usize {
        let answers = self.answers.borrow();
        answers
            .iter()
            .filter(|a| a.phase == phase && (a.status == 200) == ok)
            .count()
    }

    async fn until(&self, what: &str, mut done: impl FnMut(&Load) -> bool) -> Duration {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < DEADLINE,
                "{what}: not within {DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        start.elapsed()
    }
}

async fn request(url: &str, n: usize) -> (u16, bool) {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .finish();
    let body = serde_json::json!({"messages": [{"role": "user", "content": format!("load {n}")}],
        "stream": n.is_multiple_of(2), "max_tokens": 8});
    let Ok(mut resp) = client
        .post(format!("{url}/v1/chat/completions"))
        .send_json(&body)
        .await
    else {
        return (0, false);
    };
    let retry_after = resp.headers().contains_key("retry-after");
    let status = resp.status().as_u16();
    let _ = resp.body().limit(16 << 20).await;
    (status, retry_after)
}

async fn worker(url: String, load: Load, id: usize) {
    let mut n = id;
    while !load.stop.get() {
        let phase = load.phase.get();
        let (status, retry_after) = request(&url, n).await;
        load.answers.borrow_mut().push(Answer {
            phase,
            status,
            retry_after,
        });
        if status != 200 {
            // A well-behaved client backs off; a short pause keeps the load steady.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n += WORKERS;
    }
}

#[actix_rt::test]
async fn a_postgres_restart_mid_load_fails_closed_and_recovers_without_a_gateway_restart() {
    let cluster = Arc::new(Cluster::start("gw-restart"));
    let mut cfg = SimConfig::with_seed("pg-restart");
    cfg.hosts = 3;
    cfg.profile = Profile::Default;
    cfg.output_tokens = 8;
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let dir = temp_dir("pg-restart");
    let env = [
        ("DEVSHARD_DATABASE_URL", cluster.url()),
        ("DEVSHARD_REPLICA_ID", "r1".to_string()),
    ];
    let mut gw = Gateway::start_with_env(&sim, &dir, free_port(), &["42"], &env).await;

    let load = Load::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| tokio::task::spawn_local(worker(gw.url.clone(), load.clone(), i)))
        .collect();
    load.until("serving before the outage", |l| l.count(0, true) >= 20)
        .await;

    load.phase.set(1);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.pg_stop())
        .await
        .unwrap();
    load.until("refusals while the database is down", |l| {
        l.count(1, false) >= 10
    })
    .await;

    load.phase.set(2);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.pg_start())
        .await
        .unwrap();
    let recovered = load
        .until("serving again after the restart", |l| l.count(2, true) >= 1)
        .await;
    load.until("steady again", |l| l.count(2, true) >= 20).await;
    load.stop.set(true);
    for w in workers {
        w.await.unwrap();
    }
    assert!(
        gw.child.try_wait().unwrap().is_none(),
        "the gateway process must not have restarted"
    );

    let answers = load.answers.borrow().clone();
    let served = answers.iter().filter(|a| a.status == 200).count();
    let refused: Vec<_> = answers.iter().filter(|a| a.status != 200).collect();
    eprintln!(
        "{} answers: {served} served, {} refused; serving again {recovered:?} after pg_ctl start",
        answers.len(),
        refused.len()
    );
    for a in &refused {
        // Requests in flight when the database stopped included: a grant whose diff could not
        // be made durable, or an attempt whose escrow actor stopped under it, is refused too.
        assert!(
            a.status == 503 && a.retry_after,
            "every refusal is 503 with Retry-After: {a:?}"
        );
    }
    assert!(
        refused.iter().filter(|a| a.phase == 0).count() <= WORKERS,
        "only requests in flight at the stop may fail before it: {refused:?}"
    );

    // No nonce lost or reused: every host holds the gateway's chain (same nonce, same root)...
    let nonce = check_lockstep(&gw, &sim).await;
    assert!(served as u64 <= nonce, "{served} served, nonce {nonce}");
    gw.kill9();
    // ...and the log in PostgreSQL is contiguous from 1 and replays to its own roots.
    let replica = ReplicaConfig {
        id: "checker".into(),
        lease_ttl: Duration::from_secs(10),
        advertise_url: String::new(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let store = PgStore::open_config(cluster.config(), replica, log).unwrap();
    let diffs = store.load_diffs("42").unwrap();
    assert_eq!(diffs.len() as u64, nonce, "one diff per nonce");
    for (i, d) in diffs.iter().enumerate() {
        assert_eq!(d.nonce, i as u64 + 1, "contiguous from 1");
    }
    let info: devshard_actors::escrow::EscrowInfo =
        serde_json::from_value(store.get("escrow", "42").unwrap().unwrap()).unwrap();
    let warm = store.load_warm_deltas("42").unwrap();
    Session::restore(Arc::new(info), diffs, &warm).expect("the log replays to its own roots");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
