//! `devshard-gateway`: the command line. Each subcommand's logic lives in the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use devshard_gateway::sim::cli::SimArgs;

/// Actor-model OpenAI-compatible gateway in front of Gonka devshard hosts.
#[derive(Debug, Parser)]
#[command(name = "devshard-gateway", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a simulated devshard network (hosts, chain API, control API) until interrupted.
    Sim(SimArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Sim(args) => devshard_gateway::sim::cli::run(&args),
    }
}
