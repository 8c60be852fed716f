//! `devshard-gateway bench`: the gateway's overhead, measured.
//!
//! Starts the simulated network in this process (zero added host latency by default, or the
//! simulator's latency profile named by `--profile`, e.g. `mixed`: fast local hosts and remote
//! ones at ≈ 300 ms RTT and ≈ 1 s to a receipt), starts the real gateway as a child process
//! (`serve`, its own threads and memory: `process.rs`), and drives the same load twice from this
//! process — directly against the simulated hosts' plain OpenAI endpoint, then through the
//! gateway — printing p50/p99 time to first byte, the p99 gap between chunks and total time,
//! throughput and peak RSS for both, what the gateway adds, its sheds (503 + `Retry-After`) and
//! mean diffs per request body. With `--stragglers RATE` every host stalls that share of requests
//! for `--straggler-delay-ms` before the first token, and the gateway phase runs twice, hedging
//! on and hedging off, comparing TTFT p50/p99/p99.9 and the extra attempts. `--idle-memory` is
//! the memory run instead (`idle.rs`). Not a test: figures depend on the machine; the README
//! records ours.

mod idle;
mod load;
mod process;
mod scrape;

use std::{
    io::Write,
    time::{Duration, Instant},
};

use clap::Args;
use devshard_actors::clock::TokioClock;

use self::{
    load::{drive, Load, Phase},
    process::{cpu_seconds, peak_rss_kib, Gateway},
    scrape::{Figures, Scrape},
};
use crate::sim::{LatencyProfile, Profile, SimConfig, SimNetwork};

/// Admin key of the benchmarked gateway (hedging is switched off through the admin API).
const ADMIN_KEY: &str = "bench-admin-key";

/// Options of `bench`.
#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// Concurrent streaming requests.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Requests per phase (after a warm-up of one tenth as many).
    #[arg(long, default_value_t = 3_000)]
    pub requests: usize,
    /// Tokens per answer (short completions by default).
    #[arg(long, default_value_t = 4)]
    pub output_tokens: u32,
    /// Simulated hosts.
    #[arg(long, default_value_t = 7)]
    pub hosts: usize,
    /// The simulated hosts' latency profile (`zero`, `fast`, `default`, `mixed`).
    #[arg(long, default_value = "zero")]
    pub profile: Profile,
    /// Open loop: start requests at this rate (per second) instead of back to back, with at most
    /// `--concurrency` in flight.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Save the gateway's `/metrics` (stage histograms) to this file before it stops.
    #[arg(long)]
    pub metrics_out: Option<std::path::PathBuf>,
    /// Share of requests each host stalls before its first token (e.g. 0.01); the gateway phase
    /// then runs with hedging on and with hedging off.
    #[arg(long)]
    pub stragglers: Option<f64>,
    /// How long a straggler stalls.
    #[arg(long, default_value_t = 3_000)]
    pub straggler_delay_ms: u64,
    /// The memory run instead (`idle.rs`): `--escrows` escrows of `--hosts` participants each,
    /// `--requests-per-escrow` requests per escrow through the gateway; prints the gateway's RSS
    /// and WAL size registered, after a fifth of the requests, after all and idle again.
    #[arg(long)]
    pub idle_memory: bool,
    /// Escrows registered by `--idle-memory`.
    #[arg(long, default_value_t = 1_000)]
    pub escrows: usize,
    /// Requests per escrow of `--idle-memory` (in total: escrows × this, spread by the gateway).
    #[arg(long, default_value_t = 100)]
    pub requests_per_escrow: usize,
}

/// Runs the benchmark.
pub fn run(args: &BenchArgs) -> std::process::ExitCode {
    let run = if args.idle_memory {
        actix_web::rt::System::new().block_on(idle::run(args.clone()))
    } else {
        actix_web::rt::System::new().block_on(bench(args.clone()))
    };
    match run {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "bench: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// The hosts' latency: the named profile, each host with the stragglers when asked.
fn host_profile(args: &BenchArgs) -> Profile {
    let Some(rate) = args.stragglers else {
        return args.profile.clone();
    };
    let hosts = args.hosts.max(1);
    Profile::Custom(
        (0..hosts)
            .map(|i| LatencyProfile {
                straggler_rate: rate,
                straggler_delay_ms: args.straggler_delay_ms,
                ..args.profile.for_host(i, hosts)
            })
            .collect(),
    )
}

async fn bench(args: BenchArgs) -> Result<(), String> {
    let mut cfg = SimConfig::with_seed("bench");
    cfg.hosts = args.hosts;
    cfg.profile = host_profile(&args);
    cfg.output_tokens = args.output_tokens;
    cfg.validation_rate = 0.0;
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .map_err(|e| format!("simulator: {e}"))?;
    let mut gw = Gateway::start(&sim, Duration::from_secs(10)).await?;
    let result = phases(&args, &sim, &gw).await;
    gw.stop();
    result
}

async fn phases(args: &BenchArgs, sim: &SimNetwork, gw: &Gateway) -> Result<(), String> {
    let gateway = gw.url.as_str();
    let direct: Vec<String> = sim
        .hosts()
        .iter()
        .map(|h| format!("{}/v1/chat/completions", h.url))
        .collect();
    let via = vec![format!("{gateway}/v1/chat/completions")];
    let warm = (args.requests / 10).max(args.concurrency);
    let load = Load {
        concurrency: args.concurrency,
        rate: args.rate,
        max_tokens: args.output_tokens,
    };
    let _ = drive("warmup", &direct, warm, load).await;
    let _ = drive("warmup", &via, warm, load).await;
    let mut d = drive("direct", &direct, args.requests, load).await;
    d.peak_rss_kib = peak_rss_kib(std::process::id());
    let g = measure("gateway", gw, &via, args.requests, load).await;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "bench: concurrency={} requests={} output_tokens={} hosts={} profile={} rate={} stragglers={} load_average={}",
        args.concurrency,
        args.requests,
        args.output_tokens,
        args.hosts,
        args.profile,
        args.rate
            .map_or("closed loop".to_string(), |r| format!("{r}/s open loop")),
        args.stragglers.map_or("none".to_string(), |r| format!(
            "{r} of {} ms",
            args.straggler_delay_ms
        )),
        load_average(),
    );
    let _ = writeln!(out, "{}", d.line());
    let _ = writeln!(out, "{}", g.phase.line());
    let _ = writeln!(out, "{}", added_line(&d, &g.phase));
    let _ = writeln!(out, "{}", g.figures.line());
    let _ = writeln!(out, "{}", crypto_floor());
    let _ = writeln!(out, "{}", g.cpu_line());
    drop(out);
    if args.stragglers.is_some() {
        if !set_hedging(gateway, false).await {
            return Err("could not switch hedging off through the admin API".into());
        }
        let on = g;
        let off = measure("no-hedge", gw, &via, args.requests, load).await;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", off.phase.line());
        for run in [on, off] {
            let _ = writeln!(out, "{}", run.hedging_line());
        }
    }
    if let Some(path) = &args.metrics_out {
        save_metrics(gateway, path).await;
    }
    Ok(())
}

/// What the gateway adds to the direct path: TTFT p50 and p99, the p99 gap between chunks.
fn added_line(direct: &Phase, gateway: &Phase) -> String {
    format!(
        "gateway adds: ttft p50 {:+.2} ms, ttft p99 {:+.2} ms, inter-chunk gap p99 {:+.2} ms (direct peak RSS is this process: client + simulator)",
        gateway.ttfb(0.50) - direct.ttfb(0.50),
        gateway.ttfb(0.99) - direct.ttfb(0.99),
        gateway.gap(0.99) - direct.gap(0.99),
    )
}

/// The 1, 5 and 15 minute load averages (the machine is shared: context for the figures).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            let v: Vec<&str> = s.split_whitespace().take(3).collect();
            (v.len() == 3).then(|| v.join(" "))
        })
        .unwrap_or_else(|| "n/a".to_string())
}

/// One gateway phase: what the client saw, what the gateway's metrics moved, its CPU.
struct Measured {
    phase: Phase,
    figures: Figures,
    cpu_s: Option<f64>,
}

impl Measured {
    fn cpu_line(&self) -> String {
        let Some(cpu) = self.cpu_s else {
            return "gateway process CPU: n/a".to_string();
        };
        let n = (self.phase.served() + self.phase.shed).max(1);
        let per = cpu * 1e3 / n as f64;
        let served = self.phase.served().max(1) as f64;
        format!(
            "gateway process CPU: {cpu:.2} s for {n} requests = {per:.3} ms/request (≈ {:.0} requests/s per core); signature recoveries per served request: {:.2} computed, {:.2} from the memo",
            1e3 / per.max(1e-9),
            self.figures.recoveries_computed / served,
            self.figures.recoveries_memo / served,
        )
    }

    /// TTFT quantiles and the extra attempts (beyond one per request) of a straggler run.
    fn hedging_line(&self) -> String {
        let served = self.phase.served().max(1) as f64;
        format!(
            "{:<8} ttft p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms; extra attempts {:.2} % ({:.0} hedges for {:.0} served)",
            self.phase.name,
            self.phase.ttfb(0.50),
            self.phase.ttfb(0.99),
            self.phase.ttfb(0.999),
            100.0 * (self.figures.attempts - served).max(0.0) / served,
            self.figures.hedges,
            served,
        )
    }
}

async fn measure(
    name: &'static str,
    gw: &Gateway,
    via: &[String],
    n: usize,
    load: Load,
) -> Measured {
    let gateway = gw.url.as_str();
    let before = Scrape::fetch(gateway).await;
    let cpu_before = cpu_seconds(gw.pid());
    let mut phase = drive(name, via, n, load).await;
    phase.peak_rss_kib = peak_rss_kib(gw.pid());
    let cpu_s = cpu_seconds(gw.pid()).zip(cpu_before).map(|(a, b)| a - b);
    // Attempts settle (and count) as their races end: give the last ones a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let figures = Scrape::fetch(gateway).await.since(&before);
    Measured {
        phase,
        figures,
        cpu_s,
    }
}

/// Switches hedging on or off through `PUT /v1/admin/settings`.
async fn set_hedging(gateway: &str, on: bool) -> bool {
    let health = if on {
        serde_json::json!({"hedge_budget": 0.05, "hedge_burst": 10.0})
    } else {
        serde_json::json!({"hedge_budget": 0.0, "hedge_burst": 0.0})
    };
    let client = awc::Client::default();
    client
        .put(format!("{gateway}/v1/admin/settings"))
        .insert_header(("Authorization", format!("Bearer {ADMIN_KEY}")))
        .send_json(&serde_json::json!({ "health": health }))
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Signature operations one request costs in this benchmark, gateway and hosts together: the
/// gateway signs the diff and the request (2) and recovers the state signature, receipt and finish
/// marker (3); the serving host recovers the request's auth, the diff's user signature and, when it
/// applies them, the confirm and finish txs (4), and signs receipt, state and finish marker (3).
const RECOVERIES_PER_REQUEST: f64 = 7.0;
const SIGNATURES_PER_REQUEST: f64 = 5.0;

/// Measures secp256k1 signing and recovery on this machine (fresh messages, so the recovery memo
/// never answers) and prints the throughput ceiling they alone impose on the whole benchmark.
fn crypto_floor() -> String {
    const N: u32 = 2_000;
    let Ok(key) = devshard_actors::protocol::crypto::SigningKey::from_bytes(&[7u8; 32]) else {
        return "crypto floor: n/a".to_string();
    };
    let started = Instant::now();
    let sigs: Vec<_> = (0..N)
        .map(|i| key.sign(format!("bench floor {i}").as_bytes()))
        .collect();
    let sign_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(N);
    let started = Instant::now();
    for (i, sig) in sigs.iter().enumerate() {
        let message = format!("bench floor {i}");
        let _ = devshard_actors::protocol::crypto::recover_address(message.as_bytes(), sig);
    }
    let recover_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(N);
    let floor_us = RECOVERIES_PER_REQUEST * recover_us + SIGNATURES_PER_REQUEST * sign_us;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "crypto floor: sign {sign_us:.1} µs, recover {recover_us:.1} µs; {RECOVERIES_PER_REQUEST} recoveries + {SIGNATURES_PER_REQUEST} signatures = {floor_us:.0} µs per request → at most {:.0} req/s on {cores} cores before any HTTP, JSON or storage work",
        cores as f64 * 1e6 / floor_us.max(1e-9)
    )
}

async fn save_metrics(gateway: &str, path: &std::path::Path) {
    let scrape = Scrape::fetch(gateway).await;
    match std::fs::write(path, scrape.text()) {
        Ok(()) if !scrape.text().is_empty() => {}
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "bench: could not save the gateway's metrics"
            );
        }
    }
}
