//! `devshard-gateway sim`: options, the printed facts, and the binary itself.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Command, Stdio},
};

use clap::Parser;
use devshard_actors::protocol::{crypto::SigningKey, version::ProtocolVersion};
use devshard_gateway::sim::{
    cli::{describe, SimArgs},
    Profile,
};

use crate::client::start;

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    sim: SimArgs,
}

/// Route prefix and protocol of `sim <args>`.
fn cfg_protocol(args: &[&str]) -> (String, ProtocolVersion) {
    let w = Wrapper::parse_from(std::iter::once("sim").chain(args.iter().copied()));
    let cfg = w.sim.to_config().unwrap();
    assert_eq!(cfg.effective_session_config(3).protocol, cfg.protocol);
    (cfg.route_prefix, cfg.protocol)
}

#[test]
fn options_build_the_library_config() {
    let key = SigningKey::derive("cli", 9);
    let w = Wrapper::parse_from([
        "sim",
        "--hosts",
        "3",
        "--profile",
        "mixed",
        "--escrow",
        "7",
        "--escrow",
        "8",
        "--gateway-key",
        &key.secret_hex(),
        "--execution-timeout",
        "30",
    ]);
    let cfg = w.sim.to_config().unwrap();
    assert_eq!(
        (cfg.hosts, cfg.profile, cfg.escrow_ids.clone()),
        (3, Profile::Mixed, vec!["7".into(), "8".into()])
    );
    assert_eq!(cfg.gateway_key.address(), key.address());
    let session = cfg.session_config.unwrap();
    assert_eq!(
        (
            session.execution_timeout,
            session.refusal_timeout,
            session.vote_threshold
        ),
        (30, 60, 1)
    );
    assert_eq!(
        cfg_protocol(&[]),
        ("/v1/devshard".into(), ProtocolVersion::V2)
    );
    assert_eq!(
        cfg_protocol(&["--protocol", "v4.1"]),
        ("/devshard/v4.1".into(), ProtocolVersion::V4_1)
    );
    let proxied = cfg_protocol(&["--protocol", "v4.1", "--route-prefix", "/p"]);
    assert_eq!(proxied, ("/p".into(), ProtocolVersion::V4_1));
    assert!(Wrapper::try_parse_from(["sim", "--protocol", "v5"]).is_err());
    assert!(Wrapper::try_parse_from(["sim", "--profile", "warp"]).is_err());
    let bad = Wrapper::parse_from(["sim", "--gateway-key", "xyz"]);
    assert!(bad.sim.to_config().is_err());
}

#[actix_rt::test]
async fn describe_lists_every_fact_once() {
    let mut cfg = crate::client::config(2);
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    let net = start(cfg).await;
    let facts = describe(&net);
    let names: Vec<&str> = facts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "escrow_id",
            "escrow_ids",
            "group",
            "gateway_key",
            "gateway_address",
            "chain_api",
            "control_api",
            "route_prefix",
            "protocol",
            "model",
            "profile",
            "host_0",
            "host_1"
        ]
    );
    let get = |n: &str| facts.iter().find(|(k, _)| k == n).unwrap().1.clone();
    assert_eq!(get("escrow_ids"), "42,43");
    assert_eq!(
        SigningKey::from_hex(&get("gateway_key")).unwrap().address(),
        net.gateway_key().address()
    );
    assert_eq!(get("group").split(',').count(), 2);
    assert_eq!(get("host_1"), net.hosts()[1].url);
}

/// Runs the real binary, reads its facts and asks its chain API for the escrow.
#[test]
fn the_binary_prints_its_facts_and_serves_until_killed() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_devshard-gateway"))
        .args(["sim", "--hosts", "2", "--profile", "zero"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut facts = std::collections::BTreeMap::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let (name, value) = line.split_once(": ").unwrap();
        facts.insert(name.to_owned(), value.to_owned());
        if name == "host_1" {
            break;
        }
    }
    assert_eq!(facts["escrow_id"], "42");
    let chain = facts["chain_api"].trim_start_matches("http://").to_owned();
    let mut tcp = std::net::TcpStream::connect(&chain).unwrap();
    let req = "GET /productscience/inference/inference/devshard_escrow/42 HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n";
    tcp.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(
        answer.contains(&format!("\"creator\":\"{}\"", facts["gateway_address"])),
        "{answer}"
    );
}
