//! Fuzz entry points: one function per `cargo fuzz` target in `fuzz/` (its own workspace), each
//! feeding untrusted bytes to the parsers the gateway really uses. `tests/fuzz_corpus.rs` replays
//! every committed corpus file through the same functions on stable, so a fixed crash stays fixed.
//!
//! A function returns normally for any input the parser handles (accepted or rejected with a
//! typed error). It panics only when the parser itself panics or an oracle fails: splitting an
//! SSE stream anywhere gives the same events, a decoded protobuf re-encodes to the same message,
//! a normalised chat request normalises to itself, a parsed address re-parses to itself.
//! Hidden from the docs: not an API, only the smallest surface the fuzzer needs.

use std::path::Path;

use devshard_actors::{
    chain::{
        backoff::RetryAfter,
        snapshot::{parse_epoch, parse_participants, parse_versions},
        ChainPollSettings,
    },
    host::error::{error_message, HostError},
    policy::settings::HealthSettings,
    protocol::{
        crypto::{Address, SigningKey},
        proto::{DevshardTx, DiffContent, ExecutorReceiptContent},
        sse::{self, HostEvent, SseParser},
        wire::{
            decode_txs, DiffJson, InferenceResponse, MempoolResponse, MetaEvent, ReceiptEvent,
            SignaturesResponse, VerifyTimeoutResponse,
        },
    },
};
use prost::Message;
use serde_json::{Map, Value};

use crate::{
    chain::{build, types},
    config::{env, raw::RawConfig, Config, EnvMap},
    http::{normalize, settings},
};

/// The names of the fuzz targets (`fuzz/fuzz_targets/<name>.rs`, `fuzz/corpus/<name>/`).
pub const TARGETS: [&str; 8] = [
    "sse_parser",
    "host_responses",
    "chat_normalize",
    "settings_merge",
    "config_toml",
    "proto_decode",
    "bech32_address",
    "chain_snapshots",
];

/// Runs target `name` on `data`; `false` if there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "sse_parser" => sse_parser(data),
        "host_responses" => host_responses(data),
        "chat_normalize" => chat_normalize(data),
        "settings_merge" => settings_merge(data),
        "config_toml" => config_toml(data),
        "proto_decode" => proto_decode(data),
        "bech32_address" => bech32_address(data),
        "chain_snapshots" => chain_snapshots(data),
        _ => return false,
    }
    true
}

fn parse_stream(parser: &mut SseParser, chunks: &[&[u8]]) -> Vec<HostEvent> {
    let mut events: Vec<HostEvent> = chunks.iter().flat_map(|c| parser.push(c)).collect();
    events.extend(parser.flush());
    events
}

/// The gateway-side SSE parser, whole and split every `k` bytes (`k` from the first byte), with
/// the default cap and a small one: the same events and the same verdict.
pub fn sse_parser(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let step = usize::from(first % 31) + 1;
    for cap in [0, 64 + usize::from(first)] {
        let mut whole = SseParser::with_max_event_bytes(cap);
        let whole_events = parse_stream(&mut whole, &[body]);
        let chunks: Vec<&[u8]> = body.chunks(step).collect();
        let mut split = SseParser::with_max_event_bytes(cap);
        let split_events = parse_stream(&mut split, &chunks);
        assert_eq!(whole_events, split_events, "split every {step} bytes");
        assert_eq!(whole.saw_terminator(), split.saw_terminator());
        assert_eq!(whole.finish(), split.finish());
    }
    let _ = sse::parse_legacy_body(body).map(|r| (r.receipt_body(), r.decode_mempool()));
}

/// Host answers: a non-200 status with its body and `X-Devshard-Error` (typed once), the receipt
/// and meta events, the legacy JSON answer, `signatures`, `verify-timeout`, `mempool`.
pub fn host_responses(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let status = [400, 401, 403, 404, 409, 429, 500, 502, 503, 504][usize::from(selector % 10)];
    let header = ["requests_disabled", "initializing", "other"][usize::from(selector / 10 % 3)];
    let err = HostError::from_status(status, body, Some(header), None);
    assert!(err.rejection().is_some(), "an HTTP error is always typed");
    let _ = err.to_string();
    let _ = error_message(body);
    if let Ok(r) = serde_json::from_slice::<ReceiptEvent>(body) {
        if let Some(receipt) = r.devshard_receipt.receipt {
            let _ = ExecutorReceiptContent::decode(receipt.as_slice());
        }
    }
    if let Ok(m) = serde_json::from_slice::<MetaEvent>(body) {
        let _ = m.devshard_meta.decode_txs();
    }
    if let Ok(r) = serde_json::from_slice::<InferenceResponse>(body) {
        let _ = r.decode_mempool();
    }
    if let Ok(m) = serde_json::from_slice::<MempoolResponse>(body) {
        let _ = m.decode_txs();
    }
    let _ = serde_json::from_slice::<SignaturesResponse>(body);
    let _ = serde_json::from_slice::<VerifyTimeoutResponse>(body);
}

const LIMITS: normalize::ChatLimits = normalize::ChatLimits {
    default_max_tokens: 256,
    max_tokens_cap: 4_096,
};

/// `POST /v1/chat/completions` normalisation: parse, choose the model, finish; a normalised
/// body normalises again to the same body and prompt hash.
pub fn chat_normalize(data: &[u8]) {
    let served = ["model-a".to_owned(), "model-b".to_owned()];
    let Ok(req) = normalize::parse(data, LIMITS) else {
        return;
    };
    let Ok(model) = normalize::choose_model(req.model.as_deref(), &served, Some("model-a")) else {
        return;
    };
    // Forcing off: a forced field would read as the client's own on the second pass.
    let shaping = crate::config::operator::ShapingConfig {
        force_logprobs: false,
        ..Default::default()
    };
    let Ok(first) = normalize::finish(req, model, &shaping) else {
        return;
    };
    let again = normalize::parse(&first.body, LIMITS)
        .and_then(|r| {
            let model = normalize::choose_model(r.model.as_deref(), &served, None)?;
            normalize::finish(r, model, &shaping)
        })
        .map_err(|e| format!("{e:?}"));
    assert_eq!(Ok(first), again, "a normalised body normalises to itself");
}

/// `PUT /v1/admin/settings`: each section merged into the defaults field by field, then
/// validated; a merge without errors round-trips through JSON.
pub fn settings_merge(data: &[u8]) {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let section = |name: &str| match body.get(name) {
        Some(Value::Object(o)) => Some(o.clone()),
        _ => None,
    };
    if let Some(patch) = section("health") {
        merge_section::<HealthSettings>("health", &patch, |s| s.validate().is_ok());
    }
    if let Some(patch) = section("chain_poll") {
        merge_section::<ChainPollSettings>("chain_poll", &patch, |s| s.validate().is_ok());
    }
}

fn merge_section<T>(name: &str, patch: &Map<String, Value>, validate: impl Fn(&T) -> bool)
where
    T: Default + PartialEq + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut errors = Vec::new();
    let defaults = T::default();
    let merged = settings::merge(name, &defaults, &defaults, patch, &mut errors);
    if let (Some(m), true) = (&merged, errors.is_empty()) {
        let _ = validate(m);
        let back = serde_json::to_value(m)
            .ok()
            .and_then(|v| serde_json::from_value::<T>(v).ok());
        assert_eq!(back.as_ref(), Some(m), "merged settings round-trip");
    }
}

/// The config file: TOML → `RawConfig` → environment (none) → validation. The key file path is
/// dropped so the fuzzer never opens files.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut raw) = RawConfig::from_toml_str(text, Path::new("fuzz.toml")) else {
        return;
    };
    raw.private_key_file = None;
    if env::apply(&mut raw, &EnvMap::new()).is_ok() {
        let _ = Config::from_raw(raw).map_err(|e| e.to_string());
    }
}

fn roundtrip<M: Message + Default + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(m) = M::decode(data) {
        let again = M::decode(m.encode_to_vec().as_slice());
        assert_eq!(again.as_ref(), Ok(&m), "decode ∘ encode is the identity");
    }
}

/// The protobuf decoders: `DiffContent` (diff txs), `DevshardTx` (mempools, metas), receipts,
/// and the `DiffJson` wire form (base64 txs whose inner nonce must match).
pub fn proto_decode(data: &[u8]) {
    roundtrip::<DiffContent>(data);
    roundtrip::<DevshardTx>(data);
    roundtrip::<ExecutorReceiptContent>(data);
    let _ = decode_txs(&[data.to_vec()]);
    if let Ok(json) = serde_json::from_slice::<DiffJson>(data) {
        if let Ok(diff) = json.to_diff() {
            assert_eq!(DiffJson::from_diff(&diff).to_diff().ok(), Some(diff));
        }
    }
}

/// `gonka1…` addresses (and hex keys): a parsed address re-parses to itself.
pub fn bech32_address(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(a) = Address::parse(&text) {
        assert_eq!(Address::parse(a.as_str()).ok(), Some(a.clone()));
        assert!(a.as_str().starts_with("gonka1"), "{a:?}");
    }
    let _ = build::address("fuzz", "creator", &text);
    let _ = SigningKey::from_hex(&text);
}

/// The chain API: `epochs/latest`, `epochs/current/participants`, `/v1/versions`, `Retry-After`,
/// and the REST escrow / participant / params records the registration reads.
pub fn chain_snapshots(data: &[u8]) {
    if let Ok(epoch) = parse_epoch(data) {
        let _ = (
            epoch.phase_kind(),
            epoch.is_validation(),
            epoch.poc_end_height(),
        );
    }
    let _ = parse_participants(data);
    let _ = parse_versions(data);
    let _ = RetryAfter::parse(&String::from_utf8_lossy(data));
    if let Ok(types::EscrowResponse {
        escrow: Some(e), ..
    }) = serde_json::from_slice::<types::EscrowResponse>(data)
    {
        let _ = build::group("fuzz", &e);
        let _ = build::session_config(&e, None, e.slots.len());
    }
    let _ = serde_json::from_slice::<types::ParticipantResponse>(data);
    if let Ok(p) = serde_json::from_slice::<types::ParamsResponse>(data) {
        let _ = p.params.devshard_escrow_params.map(|p| p.max_nonce);
    }
}
