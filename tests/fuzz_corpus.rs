//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`, seeds and every input the fuzzer
//! kept or found) through the same entry functions the `cargo fuzz` targets call, on stable, so
//! a crash that was fixed stays fixed. A corpus file that panics fails the test with its path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use devshard_gateway::fuzzing;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_fuzz_target_has_a_seed_corpus_and_no_input_crashes() {
    let mut failures = Vec::new();
    for target in fuzzing::TARGETS {
        let files = corpus(target);
        assert!(!files.is_empty(), "{target}: no corpus");
        for file in files {
            let data = std::fs::read(&file).unwrap();
            if std::panic::catch_unwind(|| fuzzing::run(target, &data)).is_err() {
                failures.push(file.display().to_string());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "corpus inputs that crash: {failures:#?}"
    );
}

#[test]
fn every_target_has_a_cargo_fuzz_binary() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/Cargo.toml")).unwrap();
    for target in fuzzing::TARGETS {
        assert!(
            manifest.contains(&format!("path = \"fuzz_targets/{target}.rs\"")),
            "{target} missing from fuzz/Cargo.toml"
        );
    }
    assert!(!fuzzing::run("no_such_target", b""));
}

/// Found by `chat_normalize` (`fuzz/corpus/chat_normalize/crash-fff114f2…`): serde_json's default
/// float parser is not exact, so `"n": 3e72` was read as 2.9999999999999996e72 and the gateway
/// forwarded and hashed a body with another number than the client's (and than a Go host parses).
/// `float_roundtrip` (workspace `serde_json` feature) makes parsing exact.
#[test]
fn a_float_serde_json_used_to_round_is_forwarded_unchanged() {
    let limits = devshard_gateway::http::normalize::ChatLimits {
        default_max_tokens: 256,
        max_tokens_cap: 4_096,
    };
    let raw = br#"{"messages":[{"role":"user","content":"x"}],"n":3e72,"t":0.1}"#;
    let req = devshard_gateway::http::normalize::parse(raw, limits).unwrap();
    let out = devshard_gateway::http::normalize::finish(
        req,
        "m".into(),
        &devshard_gateway::config::operator::ShapingConfig {
            force_logprobs: false,
            ..Default::default()
        },
    )
    .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(body["n"].as_f64(), Some(3e72));
    assert!(
        String::from_utf8_lossy(&out.body).contains("\"n\":3e+72"),
        "{:?}",
        out.body
    );
    let data = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus/chat_normalize/crash-fff114f29179a6bab495c15404ef3b63286fe2b7"
    ))
    .unwrap();
    fuzzing::chat_normalize(&data);
}
