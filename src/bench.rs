//! `devshard-gateway bench`: the gateway's overhead, measured.
//!
//! Starts the simulated network in this process (zero added host latency), starts the real
//! gateway as a child process (`serve`, its own threads and memory), and drives the same load
//! twice from this process — directly against the simulated hosts' plain OpenAI endpoint, then
//! through the gateway — printing p50/p99 time to first byte and total time, throughput and peak
//! RSS for both. Not a test: figures depend on the machine; the README records ours.

use std::{
    cell::RefCell,
    io::Write,
    process::{Child, Command, ExitCode, Stdio},
    rc::Rc,
    time::{Duration, Instant},
};

use clap::Args;
use devshard_actors::clock::TokioClock;
use futures::StreamExt;

use crate::sim::{Profile, SimConfig, SimNetwork};

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
    /// Open loop: start requests at this rate (per second) instead of back to back, with at most
    /// `--concurrency` in flight.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Save the gateway's `/metrics` (stage histograms) to this file before it stops.
    #[arg(long)]
    pub metrics_out: Option<std::path::PathBuf>,
}

/// One phase's measurements.
struct Phase {
    name: &'static str,
    ttfb_ms: Vec<f64>,
    total_ms: Vec<f64>,
    failures: usize,
    elapsed: Duration,
    peak_rss_kib: Option<u64>,
}

impl Phase {
    fn line(&mut self) -> String {
        self.ttfb_ms.sort_by(f64::total_cmp);
        self.total_ms.sort_by(f64::total_cmp);
        let n = self.total_ms.len();
        format!(
            "{:<8} requests={:<6} failures={:<4} ttfb_p50={:>7.2}ms ttfb_p99={:>7.2}ms total_p50={:>7.2}ms total_p99={:>7.2}ms throughput={:>7.0}/s peak_rss={}",
            self.name,
            n,
            self.failures,
            pct(&self.ttfb_ms, 0.50),
            pct(&self.ttfb_ms, 0.99),
            pct(&self.total_ms, 0.50),
            pct(&self.total_ms, 0.99),
            n as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.peak_rss_kib.map_or("n/a".to_string(), |k| format!("{} MiB", k / 1024)),
        )
    }
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(idx).copied().unwrap_or(f64::NAN)
}

/// CPU seconds (user + system) a process has used so far (Linux).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Peak resident set size (`VmHWM`) of a process, in KiB (Linux).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the benchmark.
pub fn run(args: &BenchArgs) -> ExitCode {
    actix_web::rt::System::new().block_on(bench(args.clone()))
}

async fn bench(args: BenchArgs) -> ExitCode {
    let mut cfg = SimConfig::with_seed("bench");
    cfg.hosts = args.hosts;
    cfg.profile = Profile::Zero;
    cfg.output_tokens = args.output_tokens;
    cfg.validation_rate = 0.0;
    let sim = match SimNetwork::start(cfg, TokioClock::new().shared()).await {
        Ok(s) => s,
        Err(e) => return fail(&format!("bench: simulator: {e}")),
    };
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => return fail(&format!("bench: port: {e}")),
    };
    let dir = std::env::temp_dir().join(format!("devshard-bench-{}", std::process::id()));
    let mut child = match spawn_gateway(&sim, &dir, port) {
        Ok(c) => c,
        Err(e) => return fail(&format!("bench: gateway: {e}")),
    };
    let gateway = format!("http://127.0.0.1:{port}");
    if !wait_ready(&gateway).await {
        let _ = child.kill();
        return fail("bench: the gateway did not become ready");
    }
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
    };
    let _ = drive("warmup", &direct, warm, load).await;
    let _ = drive("warmup", &via, warm, load).await;
    let mut d = drive("direct", &direct, args.requests, load).await;
    d.peak_rss_kib = peak_rss_kib(std::process::id());
    let cpu_before = cpu_seconds(child.id());
    let mut g = drive("gateway", &via, args.requests, load).await;
    g.peak_rss_kib = peak_rss_kib(child.id());
    let cpu = cpu_seconds(child.id()).zip(cpu_before).map(|(a, b)| a - b);
    let added = pct_sorted(&g.ttfb_ms, 0.99) - pct_sorted(&d.ttfb_ms, 0.99);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "bench: concurrency={} requests={} output_tokens={} hosts={} rate={}",
        args.concurrency,
        args.requests,
        args.output_tokens,
        args.hosts,
        args.rate
            .map_or("closed loop".to_string(), |r| format!("{r}/s open loop"))
    );
    let _ = writeln!(out, "{}", d.line());
    let _ = writeln!(out, "{}", g.line());
    let _ = writeln!(out, "gateway adds {added:.2} ms at p99 time to first byte (direct peak RSS is this process: client + simulator)");
    let _ = writeln!(out, "{}", crypto_floor());
    if let Some(cpu) = cpu {
        let per = cpu * 1e3 / args.requests.max(1) as f64;
        let _ = writeln!(out, "gateway process CPU: {cpu:.2} s for {} requests = {per:.3} ms/request (≈ {:.0} requests/s per core)", args.requests, 1e3 / per.max(1e-9));
    }
    drop(out);
    if let Some(path) = &args.metrics_out {
        save_metrics(&gateway, path).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    ExitCode::SUCCESS
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

fn pct_sorted(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    pct(&s, q)
}

fn spawn_gateway(sim: &SimNetwork, dir: &std::path::Path, port: u16) -> std::io::Result<Child> {
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
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
}

async fn save_metrics(gateway: &str, path: &std::path::Path) {
    let client = awc::Client::default();
    let body = match client.get(format!("{gateway}/metrics")).send().await {
        Ok(mut r) => r.body().limit(64 << 20).await.ok(),
        Err(_) => None,
    };
    match body.map(|b| std::fs::write(path, b)) {
        Some(Ok(())) => {}
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "bench: could not save the gateway's metrics"
            );
        }
    }
}

async fn wait_ready(url: &str) -> bool {
    let client = awc::Client::default();
    for _ in 0..400 {
        if let Ok(r) = client.get(format!("{url}/readyz")).send().await {
            if r.status().is_success() {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// How requests are started.
#[derive(Clone, Copy, Debug)]
struct Load {
    /// At most this many in flight (closed loop: exactly this many, back to back).
    concurrency: usize,
    /// Open loop: request `i` is due at `i / rate` seconds after the start.
    rate: Option<f64>,
}

/// `n` streaming requests, round-robin over `urls`.
async fn drive(name: &'static str, urls: &[String], n: usize, load: Load) -> Phase {
    let concurrency = load.concurrency.max(1);
    let phase = Rc::new(RefCell::new(Phase {
        name,
        ttfb_ms: Vec::with_capacity(n),
        total_ms: Vec::with_capacity(n),
        failures: 0,
        elapsed: Duration::ZERO,
        peak_rss_kib: None,
    }));
    let connector = awc::Connector::new().limit(concurrency * 2);
    let client = awc::Client::builder()
        .connector(connector)
        .timeout(Duration::from_secs(60))
        .finish();
    let started = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let (client, phase) = (client.clone(), phase.clone());
            let url = urls.get(i % urls.len().max(1)).cloned().unwrap_or_default();
            async move {
                let body = format!(r#"{{"stream":true,"max_tokens":16,"messages":[{{"role":"user","content":"bench {i}"}}]}}"#);
                if let Some(rate) = load.rate.filter(|r| *r > 0.0) {
                    let due = started + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                // From the actual start: the timer wheel wakes up to 1 ms late, which would
                // otherwise dominate both phases' figures (the in-flight cap is never reached at
                // the rates we report, so no queueing is hidden).
                let t0 = Instant::now();
                let ok = match client.post(url).insert_header(("Content-Type", "application/json")).send_body(body).await {
                    Ok(mut resp) if resp.status().is_success() => {
                        let mut first = None;
                        let mut ok = true;
                        while let Some(chunk) = resp.next().await {
                            if chunk.is_err() {
                                ok = false;
                                break;
                            }
                            first.get_or_insert_with(|| t0.elapsed());
                        }
                        first.filter(|_| ok).map(|f| (f, t0.elapsed()))
                    }
                    _ => None,
                };
                let mut p = phase.borrow_mut();
                match ok {
                    Some((first, total)) => {
                        p.ttfb_ms.push(first.as_secs_f64() * 1e3);
                        p.total_ms.push(total.as_secs_f64() * 1e3);
                    }
                    None => p.failures += 1,
                }
            }
        })
        .await;
    let elapsed = started.elapsed();
    let mut p = match Rc::try_unwrap(phase) {
        Ok(cell) => cell.into_inner(),
        Err(rc) => std::mem::replace(
            &mut *rc.borrow_mut(),
            Phase {
                name,
                ttfb_ms: vec![],
                total_ms: vec![],
                failures: 0,
                elapsed: Duration::ZERO,
                peak_rss_kib: None,
            },
        ),
    };
    p.elapsed = elapsed;
    p
}

fn fail(message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{message}");
    ExitCode::from(1)
}
