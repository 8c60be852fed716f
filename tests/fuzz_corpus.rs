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
