#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devshard_gateway::fuzzing::chain_snapshots(data));
