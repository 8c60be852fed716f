//! The benchmarked gateway as a process: started as a child (`serve`, its own threads and
//! memory) against the in-process simulator, and read from `/proc` (CPU, resident and peak
//! memory) and its data directory (the store's WAL file).

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::ADMIN_KEY;
use crate::sim::SimNetwork;

/// A running gateway child process and where it keeps its data.
pub(super) struct Gateway {
    pub child: Child,
    pub url: String,
    pub dir: PathBuf,
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
        };
        if !wait_ready(&gateway.url, ready_within).await {
            gateway.stop();
            return Err("the gateway did not become ready".into());
        }
        Ok(gateway)
    }

    /// Stops the process and removes its data directory.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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
    status_kib(pid, "VmHWM:")
}

/// Resident set size now (`VmRSS`) of a process, in KiB (Linux).
pub(super) fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn spawn(sim: &SimNetwork, dir: &std::path::Path, port: u16) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .arg("serve")
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
