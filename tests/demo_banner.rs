//! The demo's banner stays whole: 20 demo starts with stdout and stderr in the same pipe (as in a
//! terminal or `2>&1`), logging at debug level so that log lines race the banner; every banner
//! line must parse as `name: value` with the value intact, and every other line as JSON.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

const STARTS: usize = 20;
/// Banner names, in the order printed; the last one ends the banner.
const NAMES: &[&str] = &[
    "gateway",
    "simulator_control",
    "chain_api",
    "escrows",
    "model",
    "protocol",
    "data_dir",
    "metrics",
    "debug",
    "admin_key",
    "curl_stream",
    "curl",
    "settle",
    "inject_fault",
];

/// Starts one demo and reads its merged output up to the end of the banner.
fn one_start(i: usize) -> (BTreeMap<String, String>, usize) {
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_devshard-gateway"))
        .args(["demo", "--profile", "zero", "--hosts", "3"])
        .env_remove("DEVSHARD_ADMIN_API_KEY")
        .env_remove("DEVSHARD_CONFIG")
        .env("DEVSHARD_LISTEN", "127.0.0.1:0")
        .env("DEVSHARD_LOG_LEVEL", "debug")
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut banner = BTreeMap::new();
    let mut logs = 0;
    for line in BufReader::new(reader).lines() {
        let line = line.unwrap();
        if line.starts_with('{') {
            serde_json::from_str::<serde_json::Value>(&line)
                .unwrap_or_else(|e| panic!("start {i}: a log line was split ({e}): {line}"));
            logs += 1;
            continue;
        }
        let (name, value) = line
            .split_once(": ")
            .unwrap_or_else(|| panic!("start {i}: not a banner line: {line:?}"));
        assert!(
            NAMES.contains(&name),
            "start {i}: unknown banner name in {line:?}"
        );
        assert!(
            !value.contains('{') || name.starts_with("curl") || name == "inject_fault",
            "start {i}: a log line inside a banner line: {line:?}"
        );
        assert!(
            banner.insert(name.to_string(), value.to_string()).is_none(),
            "start {i}: {name} twice"
        );
        if name == "inject_fault" {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    (banner, logs)
}

#[test]
fn twenty_demo_banners_parse_whole() {
    let mut logs = 0;
    for i in 0..STARTS {
        let (banner, n) = one_start(i);
        logs += n;
        assert_eq!(banner.len(), NAMES.len(), "start {i}: {banner:?}");
        let gw = &banner["gateway"];
        assert!(
            gw.starts_with("http://127.0.0.1:") && !gw.ends_with(":0"),
            "{gw}"
        );
        assert_eq!(
            banner["debug"],
            format!("{gw}/debug/ui#key={}", banner["admin_key"])
        );
        assert!(banner["simulator_control"].ends_with("/sim/hosts"));
        assert!(banner["curl"].starts_with(&format!("curl {gw}/v1/chat/completions")));
        assert!(
            banner["curl_stream"].ends_with("}]}'"),
            "{}",
            banner["curl_stream"]
        );
        assert_eq!(banner["escrows"], "42,43");
    }
    assert!(
        logs > STARTS,
        "log lines were interleaved with the banners ({logs})"
    );
}
