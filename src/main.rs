//! `devshard-gateway`: the command line. Each subcommand's logic lives in the library.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use devshard_gateway::{demo::DemoArgs, sim::cli::SimArgs};

/// jemalloc, with the options of `.cargo/config.toml` (a background thread returns freed pages
/// within about a second): against mimalloc, used until 2026-12-06, it measured the same or less
/// CPU per request and ≈ 30 MiB less RSS at 64 streams, and 155–158 MiB against 181 MiB 40 s idle
/// after 100 000 requests over 1 000 escrows (README, "Memory and disk").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Actor-model OpenAI-compatible gateway in front of Gonka devshard hosts.
#[derive(Debug, Parser)]
#[command(name = "devshard-gateway", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway (the production command).
    Serve {
        /// TOML config file (`DEVSHARD_CONFIG` works too); environment overrides it.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run the gateway against an embedded simulated devshard network.
    Demo(DemoArgs),
    /// Measure the gateway's overhead against the simulated network (direct vs through it).
    Bench(devshard_gateway::bench::BenchArgs),
    /// Run a simulated devshard network (hosts, chain API, control API) until interrupted.
    Sim(SimArgs),
    /// Run the gateway under a seeded fault schedule and check its invariants from outside.
    Chaos(devshard_gateway::chaos::ChaosArgs),
    /// Move a SQLite store into an empty PostgreSQL database (every table, one transaction).
    Migrate(devshard_gateway::store::migrate::MigrateArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve { config } => devshard_gateway::app::serve(config.as_deref()),
        Command::Demo(args) => devshard_gateway::demo::run(&args),
        Command::Bench(args) => devshard_gateway::bench::run(&args),
        Command::Sim(args) => devshard_gateway::sim::cli::run(&args),
        Command::Chaos(args) => devshard_gateway::chaos::run(&args),
        Command::Migrate(args) => {
            let (log, _guard) = devshard_gateway::logging::init(slog::Level::Info);
            devshard_gateway::store::migrate::run(&args, &log)
        }
    }
}
