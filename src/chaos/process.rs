//! The gateway under test: `devshard-gateway serve` as a child process (this same executable),
//! configured by environment and a small config file with short protocol timeouts, its stdout and
//! stderr captured to a log file that the secret check scans. `kill -9` and restart keep the data
//! directory and the port.

use std::{
    fs::File,
    io::Write,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::http::Http;
use crate::sim::SimConfig;

/// Short race timeouts so that every request ends well within the client deadline.
const CONFIG: &str = "\
[race]
receipt_timeout_ms = 8000
stall_timeout_ms = 8000
meta_drain_ms = 5000
";

/// The gateway's `[rotation]` with `--max-nonce`: one escrow kept active, the replacement created
/// a quarter of `max_nonce` before the serving limit, checked every second. The margin must
/// cover a creation (a chain tx) under chain faults at the nonce rate of a fault round: a tenth
/// (2 000 nonces) ran out 26 s into the rotating hour-long run, the nonce at ≈ 1 000 a second
/// while four hosts answered empty streams, the creation refused by a chain answering 429 and
/// retried 5 s later, after both escrows had reached their limit. Up to four spares
/// (`src/rotation/runway.rs`): at `--max-nonce 4000` an escrow lasts 6–16 s (≈ 250 nonces a
/// second in a debug build, ≈ 700 in a release build), and seed 12 ends with 10 s of chain
/// outage; with the default two spares the release build's three escrows ran dry 4 s before the
/// chain came back.
pub fn rotation_config(max_nonce: Option<u64>, sim: &SimConfig) -> String {
    let Some(max_nonce) = max_nonce else {
        return String::new();
    };
    format!(
        "[rotation]\ncheck_interval_ms = 1000\n[[rotation.models]]\nmodel = \"{}\"\n\
         target_count = 1\namount = {}\nmax_deposit_per_day = {}\nnonce_margin = {}\n\
         max_spares = {CHAOS_MAX_SPARES}\n",
        sim.model,
        sim.amount,
        sim.amount.saturating_mul(1_000),
        (max_nonce / 4).max(20)
    )
}

/// `max_spares` of the runner's rotation.
pub const CHAOS_MAX_SPARES: u32 = 4;

/// How to start the gateway (fixed for a run).
#[derive(Debug, Clone)]
pub struct GatewaySpec {
    pub exe: PathBuf,
    pub data_dir: PathBuf,
    pub port: u16,
    pub private_key_hex: String,
    pub admin_key: String,
    pub chain_url: String,
    pub escrows: Vec<String>,
    /// TOML appended to the fixed config (the rotation of `--max-nonce`).
    pub extra_config: String,
}

/// A running (or killed) gateway child.
#[derive(Debug)]
pub struct Gateway {
    spec: GatewaySpec,
    child: Option<Child>,
    /// Incremented at every start: requests that saw two generations were cut by a kill.
    pub generation: u64,
}

impl GatewaySpec {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.data_dir.join("gateway.log")
    }

    fn config_path(&self) -> PathBuf {
        self.data_dir.join("chaos.toml")
    }
}

/// Errors of starting the child.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("starting the gateway: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("the gateway did not become ready within 20 s (log: {0})")]
    NotReady(String),
}

impl Gateway {
    pub fn new(spec: GatewaySpec) -> Result<Gateway, ProcessError> {
        std::fs::create_dir_all(&spec.data_dir)?;
        let config = format!("{CONFIG}{}", spec.extra_config);
        File::create(spec.config_path())?.write_all(config.as_bytes())?;
        Ok(Gateway {
            spec,
            child: None,
            generation: 0,
        })
    }

    pub fn spec(&self) -> &GatewaySpec {
        &self.spec
    }

    /// Starts the child and waits for `/readyz` (bounded).
    pub async fn start(&mut self, http: &Http) -> Result<(), ProcessError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.spec.log_path())?;
        let s = &self.spec;
        let child = Command::new(&s.exe)
            .arg("serve")
            .arg("--config")
            .arg(s.config_path())
            .env_clear()
            .env("DEVSHARD_LISTEN", format!("127.0.0.1:{}", s.port))
            .env("DEVSHARD_DATA_DIR", &s.data_dir)
            .env("DEVSHARD_PRIVATE_KEY", &s.private_key_hex)
            .env("DEVSHARD_CHAIN_REST_URL", &s.chain_url)
            .env("DEVSHARD_PUBLIC_API_URL", &s.chain_url)
            .env("DEVSHARD_ESCROWS", s.escrows.join(","))
            .env("DEVSHARD_ADMIN_API_KEY", &s.admin_key)
            .env("DEVSHARD_LOG_LEVEL", "info")
            .env("DEVSHARD_WORKERS", "2")
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        self.child = Some(child);
        self.generation += 1;
        let url = format!("{}/readyz", s.url());
        for _ in 0..800 {
            if http.get(&url).await.is_ok_and(|(status, _)| status == 200) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(ProcessError::NotReady(s.log_path().display().to_string()))
    }

    /// SIGKILL (std's `Child::kill` on unix), then reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::RawConfig;

    #[test]
    fn max_nonce_gives_the_gateway_one_rotated_escrow_of_the_simulated_model() {
        let sim = SimConfig::with_seed("rotation-config");
        assert_eq!(rotation_config(None, &sim), "");
        let toml = format!("{CONFIG}{}", rotation_config(Some(20_000), &sim));
        let raw = RawConfig::from_toml_str(&toml, Path::new("chaos.toml")).unwrap();
        assert!(raw.rotation.active());
        let model = &raw.rotation.models[0];
        assert_eq!(model.model, sim.model);
        assert_eq!((model.target_count, model.amount), (1, sim.amount));
        assert_eq!(model.nonce_margin, 5_000);
        assert_eq!(model.max_spares, CHAOS_MAX_SPARES);
        assert_eq!(raw.rotation.check_interval_ms, 1_000);
    }
}
