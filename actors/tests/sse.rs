//! The gateway-side SSE parser against host streams: splits at every byte, CRLF, ignored lines,
//! terminators, truncation, error events, garbled protocol events and the line cap.

// Test helpers outside `#[test]` fns are not covered by clippy's allow-*-in-tests settings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use devshard_actors::protocol::{
    proto::{DevshardTx, MsgConfirmStart, MsgFinishInference, Tx},
    sse::{
        chunk_has_content, data_event, error_event, is_error_event, is_event_stream, meta_event,
        parse_legacy_body, receipt_event, HostEvent, MalformedKind, SseError, SseParser,
        DONE_EVENT,
    },
    wire::{b64, ReceiptBody},
};

const ROLE: &str =
    r#"{"object":"chat.completion.chunk","choices":[{"delta":{"role":"assistant"}}]}"#;
const HELLO: &str = r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":"Hel"}}]}"#;
const LO: &str = r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":"lo"}}]}"#;
const STOP: &str =
    r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"completion_tokens":2}}"#;

fn receipt() -> ReceiptBody {
    ReceiptBody {
        state_sig: Some(vec![7; 65]),
        state_hash: Some(vec![0xab; 32]),
        nonce: 9,
        receipt: Some(vec![5; 65]),
        confirmed_at: Some(1_700_000_005),
    }
}

fn mempool() -> Vec<DevshardTx> {
    vec![
        DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
            inference_id: 9,
            executor_sig: vec![5; 65],
            confirmed_at: 1_700_000_005,
        })),
        DevshardTx::new(Tx::FinishInference(MsgFinishInference {
            inference_id: 9,
            response_hash: vec![1; 32],
            input_tokens: 10,
            output_tokens: 2,
            executor_slot: 1,
            proposer_sig: vec![3; 65],
            escrow_id: "42".into(),
        })),
    ]
}

/// A full host answer as the simulator writes it.
fn host_stream() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&receipt_event(&receipt()));
    for chunk in [ROLE, HELLO, LO, STOP] {
        out.extend_from_slice(&data_event(chunk.as_bytes()));
    }
    out.extend_from_slice(DONE_EVENT);
    out.extend_from_slice(&meta_event(&mempool()));
    out
}

fn expected_events() -> Vec<HostEvent> {
    let mut ev = vec![HostEvent::Receipt(receipt())];
    for chunk in [ROLE, HELLO, LO, STOP] {
        ev.push(HostEvent::Chunk(Bytes::from_static(chunk.as_bytes())));
    }
    ev.push(HostEvent::Done);
    ev.push(HostEvent::Meta(mempool()));
    ev
}

/// Feeds `pieces` in order, then flushes; returns the events and the EOF verdict.
fn run(pieces: &[&[u8]]) -> (Vec<HostEvent>, Result<(), SseError>) {
    let mut p = SseParser::new();
    let mut events = Vec::new();
    for piece in pieces {
        events.extend(p.push(piece));
    }
    events.extend(p.flush());
    (events, p.finish())
}

#[test]
fn writer_output_is_exact() {
    let body = ReceiptBody {
        state_sig: Some(vec![1, 2]),
        nonce: 5,
        ..ReceiptBody::default()
    };
    assert_eq!(
        &receipt_event(&body)[..],
        b"data: {\"devshard_receipt\":{\"state_sig\":\"AQI=\",\"nonce\":5}}\n\n"
    );
    assert_eq!(DONE_EVENT, b"data: [DONE]\n\n");
    assert_eq!(&data_event(b"{}")[..], b"data: {}\n\n");
    assert_eq!(
        &meta_event(&[])[..],
        b"data: {\"devshard_meta\":{\"mempool\":[]}}\n\n"
    );
    let meta = meta_event(&mempool()[..1]);
    let want = format!(
        "data: {{\"devshard_meta\":{{\"mempool\":[\"{}\"]}}}}\n\n",
        b64::encode(&devshard_actors::protocol::proto::encode(&mempool()[0]))
    );
    assert_eq!(&meta[..], want.as_bytes());
    assert_eq!(
        &error_event("boom \"x\"")[..],
        b"data: {\"error\":{\"message\":\"boom \\\"x\\\"\"}}\n\n"
    );
    assert!(is_event_stream("text/event-stream; charset=utf-8"));
    assert!(!is_event_stream("application/json"));
}

#[test]
fn whole_stream_in_one_chunk() {
    let (events, verdict) = run(&[&host_stream()]);
    assert_eq!(events, expected_events());
    verdict.unwrap();
}

#[test]
fn split_at_every_byte_boundary() {
    let stream = host_stream();
    for cut in 0..=stream.len() {
        let (events, verdict) = run(&[&stream[..cut], &stream[cut..]]);
        assert_eq!(events, expected_events(), "cut at {cut}");
        verdict.unwrap();
    }
    // Three pieces, a sample of cut pairs.
    for a in (0..stream.len()).step_by(7) {
        for b in (a..stream.len()).step_by(13) {
            let (events, _) = run(&[&stream[..a], &stream[a..b], &stream[b..]]);
            assert_eq!(events, expected_events(), "cuts at {a},{b}");
        }
    }
}

#[test]
fn one_byte_at_a_time() {
    let stream = host_stream();
    let pieces: Vec<&[u8]> = stream.chunks(1).collect();
    let (events, verdict) = run(&pieces);
    assert_eq!(events, expected_events());
    verdict.unwrap();
}

#[test]
fn crlf_line_endings() {
    let crlf: Vec<u8> = host_stream()
        .iter()
        .flat_map(|&b| {
            if b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![b]
            }
        })
        .collect();
    let (events, verdict) = run(&[&crlf]);
    assert_eq!(events, expected_events());
    verdict.unwrap();
    for cut in 0..crlf.len() {
        let (events, _) = run(&[&crlf[..cut], &crlf[cut..]]);
        assert_eq!(events, expected_events(), "cut at {cut}");
    }
}

#[test]
fn comments_and_unknown_lines_are_ignored() {
    let mut stream = b": keep-alive\n\nevent: message\nid: 4\nretry: 1000\n".to_vec();
    stream.extend_from_slice(b"data:{\"no\":\"space\"}\nDATA: [DONE]\n  data: [DONE]\nnoise\n\n");
    stream.extend_from_slice(&host_stream());
    stream.extend_from_slice(b": trailing comment\n");
    let (events, verdict) = run(&[&stream]);
    assert_eq!(events, expected_events());
    verdict.unwrap();
}

#[test]
fn receipt_alone_is_a_terminator() {
    // Finalize / catch-up answer: receipt then meta, no [DONE].
    let mut stream = receipt_event(&receipt()).to_vec();
    stream.extend_from_slice(&meta_event(&mempool()));
    let (events, verdict) = run(&[&stream]);
    assert_eq!(
        events,
        vec![HostEvent::Receipt(receipt()), HostEvent::Meta(mempool())]
    );
    verdict.unwrap();

    // A receipt that is the last thing before EOF also counts.
    let (_, verdict) = run(&[&receipt_event(&ReceiptBody::default())]);
    verdict.unwrap();
}

#[test]
fn done_alone_is_a_terminator() {
    let mut stream = data_event(HELLO.as_bytes()).to_vec();
    stream.extend_from_slice(DONE_EVENT);
    let (events, verdict) = run(&[&stream]);
    assert_eq!(events.last(), Some(&HostEvent::Done));
    verdict.unwrap();
}

#[test]
fn truncated_stream_is_an_error() {
    let mut stream = data_event(ROLE.as_bytes()).to_vec();
    stream.extend_from_slice(&data_event(HELLO.as_bytes()));
    let (events, verdict) = run(&[&stream]);
    assert_eq!(events.len(), 2);
    let err = verdict.unwrap_err();
    assert_eq!(err, SseError::Truncated);
    assert_eq!(
        err.to_string(),
        "sse stream ended without [DONE] or devshard_receipt"
    );

    assert_eq!(run(&[]).1, Err(SseError::Truncated));
    assert_eq!(run(&[b": only a comment\n"]).1, Err(SseError::Truncated));
    // A cut inside the [DONE] line is still truncation.
    let mut cut = stream.clone();
    cut.extend_from_slice(b"data: [DO");
    assert_eq!(run(&[&cut]).1, Err(SseError::Truncated));
}

#[test]
fn unterminated_last_line_is_parsed_at_eof() {
    let mut p = SseParser::new();
    assert!(p.push(b"data: [DONE]").is_empty());
    assert!(!p.saw_terminator());
    assert_eq!(p.flush(), vec![HostEvent::Done]);
    p.finish().unwrap();
    // finish() alone still sees the terminator.
    let mut p = SseParser::new();
    p.push(b"data: [DONE]\r");
    p.finish().unwrap();
}

#[test]
fn error_events_are_classified() {
    let oai = r#"{"error":{"message":"model overloaded","type":"server_error","code":503}}"#;
    let vllm = r#"{"object":"error","message":"bad request","type":"BadRequestError","code":400}"#;
    let mut stream = data_event(oai.as_bytes()).to_vec();
    stream.extend_from_slice(&data_event(vllm.as_bytes()));
    stream.extend_from_slice(&error_event("x"));
    stream.extend_from_slice(DONE_EVENT);
    let (events, verdict) = run(&[&stream]);
    assert_eq!(
        events,
        vec![
            HostEvent::Error(Bytes::from_static(oai.as_bytes())),
            HostEvent::Error(Bytes::from_static(vllm.as_bytes())),
            HostEvent::Error(Bytes::from_static(br#"{"error":{"message":"x"}}"#)),
            HostEvent::Done,
        ]
    );
    verdict.unwrap();
    assert!(is_error_event(oai.as_bytes()) && is_error_event(vllm.as_bytes()));
}

#[test]
fn non_json_and_empty_payloads_are_forwarded() {
    let (events, _) = run(&[b"data: hello world\ndata: \ndata: [1,2]\ndata: {bad json\n"]);
    let want: Vec<HostEvent> = ["hello world", "", "[1,2]", "{bad json"]
        .into_iter()
        .map(|s| HostEvent::Chunk(Bytes::from(s)))
        .collect();
    assert_eq!(events, want);
}

fn malformed_kind(ev: &HostEvent) -> MalformedKind {
    match ev {
        HostEvent::Malformed(m) => m.kind,
        other => panic!("expected a malformed event, got {other:?}"),
    }
}

#[test]
fn garbled_meta_is_a_typed_event() {
    let junk = b64::encode(&[0xff, 0xff, 0xff]);
    let lines = [
        r#"data: {"devshard_meta":{"mempool":["not base64!"]}}"#.to_string(),
        format!(r#"data: {{"devshard_meta":{{"mempool":["{junk}"]}}}}"#),
        r#"data: {"devshard_meta":"oops"}"#.to_string(),
    ];
    for line in lines {
        let (events, verdict) = run(&[line.as_bytes(), b"\n"]);
        assert_eq!(events.len(), 1, "{line}");
        assert_eq!(malformed_kind(&events[0]), MalformedKind::Meta, "{line}");
        assert_eq!(
            verdict,
            Err(SseError::Truncated),
            "meta is not a terminator"
        );
    }
    // Go-style nulls decode to an empty mempool.
    for line in [
        &b"data: {\"devshard_meta\":{\"mempool\":null}}\n"[..],
        b"data: {\"devshard_meta\":null}\n",
        b"data: {\"devshard_meta\":{}}\n",
    ] {
        assert_eq!(run(&[line]).0, vec![HostEvent::Meta(vec![])]);
    }
}

#[test]
fn garbled_receipt_is_typed_and_still_terminates() {
    let (events, verdict) = run(&[b"data: {\"devshard_receipt\":{\"nonce\":\"x\"}}\n\n"]);
    assert_eq!(events.len(), 1);
    assert_eq!(malformed_kind(&events[0]), MalformedKind::Receipt);
    verdict.unwrap();
    let (events, _) = run(&[b"data: {\"devshard_receipt\":null}\n"]);
    assert_eq!(events, vec![HostEvent::Receipt(ReceiptBody::default())]);
}

#[test]
fn oversized_line_aborts() {
    let mut p = SseParser::with_max_event_bytes(32);
    // 31 bytes + '\n' = 32: allowed.
    let ok = format!("data: {}\n", "x".repeat(25));
    assert_eq!(ok.len(), 32);
    assert_eq!(p.push(ok.as_bytes()).len(), 1);
    let events = p.push(&[b'y'; 20]);
    assert!(events.is_empty());
    let events = p.push(&[b'y'; 20]);
    assert_eq!(events.len(), 1);
    assert_eq!(malformed_kind(&events[0]), MalformedKind::TooLarge);
    assert!(p.is_too_large());
    assert!(
        p.push(b"\ndata: [DONE]\n").is_empty(),
        "input after the abort is ignored"
    );
    let err = p.finish().unwrap_err();
    assert_eq!(err, SseError::EventTooLarge { limit: 32 });
    assert_eq!(
        err.to_string(),
        "sse event exceeds size limit: 32 byte limit"
    );

    // A long line that arrives whole is caught too, even after a terminator.
    let mut p = SseParser::with_max_event_bytes(32);
    p.push(DONE_EVENT);
    let long = format!("data: {}\n", "z".repeat(40));
    assert_eq!(
        malformed_kind(&p.push(long.as_bytes())[0]),
        MalformedKind::TooLarge
    );
    assert!(p.finish().is_err());
}

#[test]
fn content_detection_over_a_stream() {
    let (events, _) = run(&[&host_stream()]);
    let with_content: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            HostEvent::Chunk(c) => Some(chunk_has_content(c)),
            _ => None,
        })
        .collect();
    assert_eq!(with_content, vec![false, true, true, true]);
}

#[test]
fn legacy_json_body() {
    let tx = &mempool()[1];
    let body = format!(
        r#"{{"state_sig":"{}","state_hash":"{}","nonce":9,"receipt":"","confirmed_at":0,"mempool":["{}"]}}"#,
        b64::encode(&[7; 65]),
        b64::encode(&[0xab; 32]),
        b64::encode(&devshard_actors::protocol::proto::encode(tx)),
    );
    let resp = parse_legacy_body(body.as_bytes()).unwrap();
    assert_eq!(resp.state_sig, Some(vec![7; 65]));
    assert_eq!(resp.nonce, 9);
    assert_eq!(resp.receipt, None, "empty bytes decode to None");
    assert_eq!(resp.confirmed_at, Some(0));
    assert_eq!(resp.decode_mempool().unwrap(), vec![tx.clone()]);
    assert_eq!(resp.receipt_body().state_hash, Some(vec![0xab; 32]));
    assert!(parse_legacy_body(b"data: [DONE]").is_err());
    let empty = parse_legacy_body(br#"{"nonce":3,"mempool":null}"#).unwrap();
    assert!(empty.mempool.is_empty() && empty.state_sig.is_none());
}
