//! The benchmarked gateway as a process: started as a child (`serve`, its own threads and
//! memory) against the in-process simulator, and read from `/proc` (CPU, resident and peak
//! memory) and its data directory (the store's WAL file).
//!
//! `DEVSHARD_BENCH_WRAPPER` runs the child under a profiler, e.g. `heaptrack -o /tmp/gw`
//! (split on spaces, the gateway's command line appended). The figures are then read from the
//! gateway process under the wrapper, and stopping kills that process first (SIGKILL: a heap
//! profiler's "leaked" is then what was live at the last reading), then waits for the wrapper
//! to finish writing.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::ADMIN_KEY;
use crate::sim::SimNetwork;

/// The environment variable naming a wrapper command for the gateway child (see module docs).
const WRAPPER_ENV: &str = "DEVSHARD_BENCH_WRAPPER";

/// A running gateway child process and where it keeps its data.
pub(super) struct Gateway {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
    /// The gateway's own pid when it runs under a wrapper (found once it is ready).
    wrapped: Option<u32>,
}

impl Gateway {
    /// Starts `serve` on a free loopback port over `sim`'s escrows and waits until it is ready
    /// (at most `ready_within`).
    pub async fn start(sim: &SimNetwork, ready_within: Duration) -> Result<Gateway, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(format!("devshard-bench-{}", std::process::id()));
        let child = spawn(sim, &dir, port).map_err(|e| format!("gateway: {e}"))?;
        let mut gateway = Gateway {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
            wrapped: None,
        };
        if !wait_ready(&gateway.url, ready_within).await {
            gateway.stop();
            return Err("the gateway did not become ready".into());
        }
        if wrapper().is_some() {
            gateway.wrapped = gateway_under(gateway.child.id());
        }
        Ok(gateway)
    }

    /// Stops the process (under a wrapper: the gateway, then waits for the wrapper) and removes
    /// its data directory.
    pub fn stop(&mut self) {
        if let Some(pid) = self.wrapped {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        } else {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The gateway's pid (under a wrapper, the wrapped process's).
    pub fn pid(&self) -> u32 {
        self.wrapped.unwrap_or_else(|| self.child.id())
    }

    /// Size of the store's WAL file now (0 when absent: just truncated).
    pub fn wal_bytes(&self) -> u64 {
        let wal = self.dir.join(format!("{}-wal", crate::app::STORE_FILE));
        std::fs::metadata(wal).map_or(0, |m| m.len())
    }

    /// Size of the store's database file now.
    pub fn db_bytes(&self) -> u64 {
        let db = self.dir.join(crate::app::STORE_FILE);
        std::fs::metadata(db).map_or(0, |m| m.len())
    }
}

/// CPU seconds (user + system) a process has used so far (Linux).
pub(super) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Peak resident set size (`VmHWM`) of a process, in KiB (Linux).
pub(super) fn peak_rss_kib(pid: u32) -> Option<u64> {
    crate::memory::status_kib(pid, "VmHWM:")
}

/// Resident set size now (`VmRSS`) of a process, in KiB (Linux).
pub(super) fn rss_kib(pid: u32) -> Option<u64> {
    crate::memory::status_kib(pid, "VmRSS:")
}

/// The wrapper command and its arguments, when `DEVSHARD_BENCH_WRAPPER` is set and not blank.
fn wrapper() -> Option<(String, Vec<String>)> {
    let w = std::env::var(WRAPPER_ENV).ok()?;
    let mut words = w.split_whitespace().map(str::to_string);
    Some((words.next()?, words.collect()))
}

/// The process running this executable among the descendants of `root` (Linux `/proc`).
fn gateway_under(root: u32) -> Option<u32> {
    let exe = std::env::current_exe().ok()?;
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        if pid != root && std::fs::read_link(format!("/proc/{pid}/exe")).ok() == Some(exe.clone()) {
            return Some(pid);
        }
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"));
        queue.extend(
            children
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    None
}

fn spawn(sim: &SimNetwork, dir: &std::path::Path, port: u16) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = match wrapper() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.arg("serve")
        .env("DEVSHARD_LISTEN", format!("127.0.0.1:{port}"))
        .env("DEVSHARD_DATA_DIR", dir)
        .env("DEVSHARD_PRIVATE_KEY", sim.gateway_key().secret_hex())
        .env("DEVSHARD_CHAIN_REST_URL", sim.chain_url())
        .env("DEVSHARD_PUBLIC_API_URL", sim.chain_url())
        .env("DEVSHARD_ESCROWS", sim.config().escrow_ids.join(","))
        .env("DEVSHARD_LOG_LEVEL", "warning")
        .env("DEVSHARD_MAX_CONCURRENT_RACES", "4096")
        .env("DEVSHARD_ADMIN_API_KEY", ADMIN_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
}

async fn wait_ready(url: &str, within: Duration) -> bool {
    let client = awc::Client::default();
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{url}/readyz")).send().await {
            if r.status().is_success() {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}
