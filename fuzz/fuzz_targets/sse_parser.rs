#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devshard_gateway::fuzzing::sse_parser(data));
