//! `bench --idle-memory`: the gateway's memory and disk against an escrow's age. Registers
//! `--escrows` escrows (`--hosts` participants each: 1 000 × 10 = 10 000 by the issue's
//! measure), drives `escrows × --requests-per-escrow` streaming requests through the gateway
//! (closed loop at `--concurrency`; the gateway's own pick spreads them over the escrows, and the
//! run prints how evenly from the `X-Devshard-Escrow` header), and prints the gateway's RSS, peak
//! RSS and store sizes: registered, after a fifth of the requests, after all of them, and idle
//! again (5 s, then 40 s: past the escrows' idle compaction and the cost ledger's release of
//! idle replicas). Memory and WAL that do not grow with age level off between the checkpoints.

use std::{io::Write, time::Duration};

use devshard_actors::clock::TokioClock;

use super::{
    crypto_floor,
    load::{drive, Load, Phase},
    load_average,
    process::{peak_rss_kib, rss_kib, Gateway},
    scrape::Scrape,
    BenchArgs,
};
use crate::sim::{SimConfig, SimNetwork};

/// How long the gateway may take to register every escrow.
const READY_WITHIN: Duration = Duration::from_secs(600);

/// Quiet time before an idle reading (background ticks settle).
const SETTLE: Duration = Duration::from_secs(5);

/// Quiet time before the last reading: past the escrows' idle compaction (5 s) and the cost
/// ledger's release of idle replicas (30 s).
const IDLE: Duration = Duration::from_secs(40);

pub(super) async fn run(args: BenchArgs) -> Result<(), String> {
    let escrows = args.escrows.max(1);
    let mut cfg = SimConfig::with_seed("bench-idle");
    cfg.hosts = args.hosts;
    cfg.profile = args.profile.clone();
    cfg.escrow_ids = (1..=escrows).map(|i| i.to_string()).collect();
    cfg.output_tokens = args.output_tokens;
    cfg.validation_rate = 0.0;
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .map_err(|e| format!("simulator: {e}"))?;
    say(&format!(
        "idle-memory: escrows={escrows} participants={} requests={} concurrency={} load_average={}",
        escrows * args.hosts,
        escrows * args.requests_per_escrow,
        args.concurrency,
        load_average()
    ));
    let started = tokio::time::Instant::now();
    let mut gw = Gateway::start(&sim, READY_WITHIN).await?;
    say(&format!(
        "registered in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let result = phases(&args, escrows, &gw).await;
    gw.stop();
    result
}

async fn phases(args: &BenchArgs, escrows: usize, gw: &Gateway) -> Result<(), String> {
    tokio::time::sleep(SETTLE).await;
    say(&reading("registered, idle", gw, 0).await);
    let via = vec![format!("{}/v1/chat/completions", gw.url)];
    let load = Load {
        concurrency: args.concurrency,
        rate: None,
        max_tokens: args.output_tokens,
    };
    let total = escrows * args.requests_per_escrow;
    let first = drive("first", &via, total / 5, load).await;
    say(&first.line());
    say(&reading("after", gw, first.served()).await);
    let rest = drive("rest", &via, total - total / 5, load).await;
    say(&rest.line());
    let served = first.served() + rest.served();
    say(&reading("after", gw, served).await);
    say(&spread(&[&first, &rest], escrows));
    tokio::time::sleep(SETTLE).await;
    say(&reading("5 s idle after", gw, served).await);
    tokio::time::sleep(IDLE - SETTLE).await;
    say(&reading("40 s idle after", gw, served).await);
    say(&crypto_floor());
    Ok(())
}

/// The gateway's memory and store sizes now, and its heap as its own metrics give it
/// (`devshard_memory_bytes`: the live heap, and the pages jemalloc holds).
async fn reading(when: &str, gw: &Gateway, served: usize) -> String {
    let heap = heap_reading(gw).await.unwrap_or_else(|| "heap n/a".into());
    let mib = |k: Option<u64>| {
        k.map_or("n/a".to_string(), |k| {
            format!("{:.1} MiB", k as f64 / 1024.0)
        })
    };
    format!(
        "{when} {served} requests: rss {} (peak {}), {heap}, wal {:.1} MiB, db {:.1} MiB",
        mib(rss_kib(gw.pid())),
        mib(peak_rss_kib(gw.pid())),
        gw.wal_bytes() as f64 / f64::from(1 << 20),
        gw.db_bytes() as f64 / f64::from(1 << 20),
    )
}

/// `heap allocated A MiB in R MiB resident` from the gateway's `/metrics`.
async fn heap_reading(gw: &Gateway) -> Option<String> {
    let scrape = Scrape::fetch(&gw.url).await;
    let mib = |kind: &str| {
        let label = format!("kind=\"{kind}\"");
        scrape.sum("devshard_memory_bytes", &[label.as_str()]) / f64::from(1 << 20)
    };
    (!scrape.text().is_empty()).then(|| {
        format!(
            "heap allocated {:.1} MiB in {:.1} MiB resident",
            mib("allocated"),
            mib("resident")
        )
    })
}

/// How the served requests spread over the escrows (min / median / max per escrow).
fn spread(phases: &[&Phase], escrows: usize) -> String {
    let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
    for p in phases {
        for (e, n) in &p.per_escrow {
            *per.entry(e.as_str()).or_default() += n;
        }
    }
    let mut counts: Vec<usize> = per.values().copied().collect();
    counts.resize(escrows.max(counts.len()), 0);
    counts.sort_unstable();
    let at = |q: f64| {
        let i = ((counts.len() as f64 - 1.0) * q).round() as usize;
        counts.get(i).copied().unwrap_or(0)
    };
    format!(
        "requests per escrow: {} of {escrows} escrows served; min {} / median {} / max {}",
        per.len(),
        at(0.0),
        at(0.5),
        at(1.0)
    )
}

fn say(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}
