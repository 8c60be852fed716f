//! The binary carries jemalloc's options of `.cargo/config.toml` (README, "Memory against an
//! escrow's age"): without them, freed pages would stay in RSS as `MADV_FREE` for seconds.

use std::process::Command;

#[test]
fn the_binary_runs_on_jemalloc_with_a_background_thread_and_a_1_s_decay() {
    let out = Command::new(env!("CARGO_BIN_EXE_devshard-gateway"))
        .arg("--help")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    for option in [
        "opt.background_thread: true",
        "opt.dirty_decay_ms: 1000",
        "opt.muzzy_decay_ms: 0",
    ] {
        assert!(
            stats.contains(option),
            "{option} missing from jemalloc's stats:\n{stats}"
        );
    }
}
