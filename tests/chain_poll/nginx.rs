//! Through a real nginx configured like the public proxy's `api_zone` (`tests/nginx/api_zone.conf`),
//! in real time. `#[ignore]`d: `tests/nginx/run.sh` installs nginx and runs them.
//!
//! Scaling (everything time-like ÷ 6 so a run takes seconds, not hours):
//!
//! | | production | this test |
//! |---|---|---|
//! | nginx `rate` | 10 r/m | 60 r/m |
//! | nginx `burst` | 600 | 2 (shrunk: the over-rate poller must meet 503s within seconds) |
//! | budget | 6 /min | 36 /min |
//! | phase / participants / versions | 20 s / 60 s / 300 s | 3.33 s / 10 s / 50 s |
//! | back-off start | 30 s | 5 s |
//! | the reference's ticker | 5 s | 0.83 s |
//!
//! A smaller burst only makes the zero-503 run stricter; the ratio of our rate to the proxy's
//! (at most 4.67 of 10 per minute with these intervals) is the production one.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use devshard_actors::{chain::ChainPollSettings, clock::TokioClock};
use devshard_gateway::sim::{Profile, SimConfig, SimNetwork};

use crate::harness::Polling;

const TEMPLATE: &str = include_str!("../nginx/api_zone.conf");

/// A running nginx; stopped (SIGQUIT, then waited for) on drop.
struct Nginx {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Nginx {
    async fn start(upstream: &str, rate_per_min: u32, burst: u32) -> Nginx {
        let bin = std::env::var("NGINX_BIN").unwrap_or_else(|_| {
            let sbin = "/usr/sbin/nginx";
            if std::path::Path::new(sbin).exists() {
                sbin
            } else {
                "nginx"
            }
            .to_owned()
        });
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("devshard-nginx-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = TEMPLATE
            .replace("{{DIR}}", dir.to_str().unwrap())
            .replace("{{PORT}}", &port.to_string())
            .replace("{{UPSTREAM}}", upstream.trim_start_matches("http://"))
            .replace("{{RATE}}", &rate_per_min.to_string())
            .replace("{{BURST}}", &burst.to_string());
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(&bin)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {bin} (tests/nginx/run.sh installs it): {e}"));
        let nginx = Nginx {
            child,
            dir,
            url: format!("http://127.0.0.1:{port}"),
        };
        // nginx is a separate process: wait (in real time) until it listens.
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return nginx;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
        panic!("nginx did not start: {log}");
    }

    /// `(status, uri)` of every request nginx answered.
    fn access_log(&self) -> Vec<(u16, String)> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (status, uri) = l.split_once(' ')?;
                Some((status.parse().ok()?, uri.to_owned()))
            })
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-QUIT")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls the simulated chain through nginx for `run_for`; returns nginx's access log and the
/// number of 503s the poller counted.
async fn poll_through_nginx(
    settings: ChainPollSettings,
    run_for: Duration,
) -> (Vec<(u16, String)>, f64) {
    let clock = TokioClock::new().shared();
    let mut cfg = SimConfig::with_seed("chain-nginx");
    cfg.hosts = 2;
    cfg.profile = Profile::Zero;
    let net = SimNetwork::start(cfg, clock.clone()).await.unwrap();
    let nginx = Nginx::start(net.chain_url(), 60, 2).await;
    let p = Polling::start(&nginx.url, settings, clock);
    tokio::time::sleep(run_for).await;
    let ours = p.metric_sum("chain_poll_requests_total", &[("status", "503")]);
    (nginx.access_log(), ours)
}

fn count(log: &[(u16, String)], status: u16, uri: &str) -> usize {
    log.iter().filter(|(s, u)| *s == status && u == uri).count()
}

#[actix_rt::test]
#[ignore = "needs nginx: run tests/nginx/run.sh"]
async fn nginx_scaled_defaults_never_see_a_503() {
    let scaled = ChainPollSettings {
        chain_phase_poll_interval_ms: 3_333,
        participants_poll_interval_ms: 10_000,
        versions_poll_interval_ms: 50_000,
        public_api_requests_per_minute: 36,
        backoff_initial_ms: 5_000,
        backoff_max_ms: 100_000,
        poll_timeout_ms: 2_000,
        ..ChainPollSettings::default()
    };
    let (log, ours) = poll_through_nginx(scaled, Duration::from_secs(20)).await;
    let latest = count(&log, 200, "/v1/epochs/latest");
    let participants = count(&log, 200, "/v1/epochs/current/participants");
    eprintln!("nginx, scaled defaults: {latest} phase polls, {participants} participants polls");
    assert!(latest >= 5 && participants >= 2, "{log:?}");
    assert!(log.iter().all(|(s, _)| *s == 200), "{log:?}");
    assert_eq!(ours, 0.0);
}

#[actix_rt::test]
#[ignore = "needs nginx: run tests/nginx/run.sh"]
async fn nginx_reference_interval_meets_503s() {
    // The reference gateway: both endpoints on one fixed 5 s ticker (scaled: 0.83 s). The
    // budget is lifted so the poller behaves like the reference; this proves the test can fail.
    let reference = ChainPollSettings {
        chain_phase_poll_interval_ms: 833,
        participants_poll_interval_ms: 833,
        versions_poll_interval_ms: 833,
        public_api_requests_per_minute: 600,
        poll_jitter_percent: 0,
        backoff_initial_ms: 1_000,
        backoff_max_ms: 1_000,
        poll_timeout_ms: 2_000,
        ..ChainPollSettings::default()
    };
    let (log, ours) = poll_through_nginx(reference, Duration::from_secs(10)).await;
    let rejected = log.iter().filter(|(s, _)| *s == 503).count();
    eprintln!(
        "nginx, reference interval: {rejected} of {} requests got 503",
        log.len()
    );
    assert!(rejected > 0, "{log:?}");
    assert!(ours > 0.0);
}
