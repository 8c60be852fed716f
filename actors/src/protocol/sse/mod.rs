//! SSE framing of `POST …/chat/completions` answers, both ways (docs/protocol.md §3.2).
//!
//! Host side: every event is one `data: <json>\n\n` line — the `devshard_receipt` event first,
//! then raw chat chunks and `data: [DONE]`, then the `devshard_meta` event.
//!
//! Gateway side: [`SseParser`] follows upstream's `parseSSEResponse`:
//! - input is split into lines on `\n`; trailing `\r`s are dropped, so `\r\n` works too;
//! - lines not starting with `data: ` (exactly, with the space) are ignored: `event:`, `id:`,
//!   `retry:`, `:` comments, blank lines and `data:` without a space;
//! - each `data: ` line is one event (multi-line data events are not joined, as upstream);
//! - `[DONE]` → [`HostEvent::Done`] and marks a terminator;
//! - a JSON object with key `devshard_receipt` → [`HostEvent::Receipt`], which **also** marks a
//!   terminator (even when its body is garbled, as upstream);
//! - key `devshard_meta` → [`HostEvent::Meta`] with the decoded mempool;
//! - an OpenAI-style error object → [`HostEvent::Error`]; anything else, including non-JSON and
//!   empty payloads, → [`HostEvent::Chunk`] with the payload bytes to forward.
//!
//! A garbled receipt or meta body (bad JSON shape, base64 or protobuf) yields
//! [`HostEvent::Malformed`] instead of a panic or a silent drop; upstream logs and ignores it, so
//! callers should treat it like an absent event. A line longer than the limit (default 16 MiB,
//! counting its `\n`, as upstream's `MaxSSEEventBytes`; default 16 MiB here) yields one `Malformed` event of kind
//! [`MalformedKind::TooLarge`]; the parser then ignores all further input and [`SseParser::finish`]
//! fails with [`SseError::EventTooLarge`]: abort the request, like upstream.

mod content;
mod scan;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};

pub use self::content::{chunk_has_content, is_error_event};
use super::{
    proto::DevshardTx,
    wire::{InferenceResponse, MetaBody, MetaEvent, ReceiptBody, ReceiptEvent, WireError},
};

/// The final inference event.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";
/// Default cap on one SSE line including its `\n`: 16 MiB. Upstream's 1 MiB
/// (`DefaultMaxSSEEventBytes`) is passed by a whole non-streamed body with the logprobs that
/// validation needs at roughly 3 000 tokens; the gateway's cap is configurable
/// (`race.sse_max_line_bytes`).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 << 20;

const DATA_PREFIX: &[u8] = b"data: ";
const RECEIPT_KEY: &str = "devshard_receipt";
const META_KEY: &str = "devshard_meta";

/// Whether a response `Content-Type` announces SSE (else the body is a legacy JSON answer).
pub fn is_event_stream(content_type: &str) -> bool {
    content_type.starts_with("text/event-stream")
}

/// `data: <json>\n\n`.
pub fn data_event(json: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(json.len() + DATA_PREFIX.len() + 2);
    out.extend_from_slice(DATA_PREFIX);
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `data: {"devshard_receipt":{…}}\n\n`.
pub fn receipt_event(body: &ReceiptBody) -> Bytes {
    data_event(&to_json(&ReceiptEvent {
        devshard_receipt: body.clone(),
    }))
}

/// `data: {"devshard_meta":{"mempool":[…]}}\n\n` of the host's whole mempool.
pub fn meta_event(mempool: &[DevshardTx]) -> Bytes {
    data_event(&to_json(&MetaEvent {
        devshard_meta: MetaBody::from_txs(mempool),
    }))
}

/// `data: {"error":{"message":"…"}}\n\n`, the OpenAI-style error event.
pub fn error_event(message: &str) -> Bytes {
    data_event(&to_json(
        &serde_json::json!({ "error": { "message": message } }),
    ))
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    // Plain structs with string keys always serialise; the fallback is unreachable.
    serde_json::to_vec(v).unwrap_or_default()
}

/// A legacy non-SSE JSON answer of `POST …/chat/completions`.
pub fn parse_legacy_body(body: &[u8]) -> Result<InferenceResponse, WireError> {
    Ok(serde_json::from_slice(body)?)
}

/// Failure of a host SSE stream at EOF.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// Clean EOF before `[DONE]` or a receipt (upstream `ErrSSEStreamTruncated`).
    #[error("sse stream ended without [DONE] or devshard_receipt")]
    Truncated,
    /// A line exceeded the cap (upstream `ErrSSEEventTooLarge`).
    #[error("sse event exceeds size limit: {limit} byte limit")]
    EventTooLarge { limit: usize },
}

/// One parsed host event.
#[derive(Clone, Debug, PartialEq)]
pub enum HostEvent {
    Receipt(ReceiptBody),
    Meta(Vec<DevshardTx>),
    Done,
    /// The raw payload of an inference `data:` line, to forward.
    Chunk(Bytes),
    /// The raw payload of an OpenAI-style error event, to forward.
    Error(Bytes),
    Malformed(Malformed),
}

/// A protocol event that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub kind: MalformedKind,
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MalformedKind {
    /// `devshard_receipt` body not decodable (still counted as a terminator).
    Receipt,
    /// `devshard_meta` body or one of its txs not decodable; the mempool is unknown.
    Meta,
    /// A line over the size cap; the stream must be abandoned.
    TooLarge,
}

/// Incremental gateway-side parser; feed it body chunks as they arrive, split anywhere.
#[derive(Debug)]
pub struct SseParser {
    /// The current incomplete line.
    buf: Vec<u8>,
    max_line: usize,
    saw_terminator: bool,
    too_large: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser with another line cap (`0` means the default).
    pub fn with_max_event_bytes(max_line: usize) -> Self {
        let max_line = if max_line == 0 {
            DEFAULT_MAX_EVENT_BYTES
        } else {
            max_line
        };
        SseParser {
            buf: Vec::new(),
            max_line,
            saw_terminator: false,
            too_large: false,
        }
    }

    /// Whether `[DONE]` or a receipt has been seen.
    pub fn saw_terminator(&self) -> bool {
        self.saw_terminator
    }

    /// Whether a line exceeded the cap (the parser then ignores input).
    pub fn is_too_large(&self) -> bool {
        self.too_large
    }

    /// Parses every complete line in `chunk` (plus what was buffered before it).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<HostEvent> {
        let mut events = Vec::new();
        let mut rest = chunk;
        while !self.too_large {
            let Some(pos) = rest.iter().position(|&b| b == b'\n') else {
                if self.buf.len() + rest.len() > self.max_line {
                    self.fail(&mut events);
                } else {
                    self.buf.extend_from_slice(rest);
                }
                break;
            };
            if self.buf.len() + pos + 1 > self.max_line {
                self.fail(&mut events);
                break;
            }
            if self.buf.is_empty() {
                self.handle_line(&rest[..pos], &mut events);
            } else {
                self.buf.extend_from_slice(&rest[..pos]);
                let mut line = std::mem::take(&mut self.buf);
                self.handle_line(&line, &mut events);
                line.clear();
                self.buf = line;
            }
            rest = &rest[pos + 1..];
        }
        events
    }

    /// At EOF: parses a final line that had no `\n` (upstream handles it too). Call before
    /// [`SseParser::finish`] to receive its events; `finish` alone still counts its terminator.
    pub fn flush(&mut self) -> Vec<HostEvent> {
        let mut events = Vec::new();
        if !self.too_large && !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.handle_line(&line, &mut events);
        }
        events
    }

    /// Verdict at a clean EOF: `Ok` iff a terminator was seen and no line was too large.
    pub fn finish(mut self) -> Result<(), SseError> {
        self.flush();
        if self.too_large {
            Err(SseError::EventTooLarge {
                limit: self.max_line,
            })
        } else if self.saw_terminator {
            Ok(())
        } else {
            Err(SseError::Truncated)
        }
    }

    fn fail(&mut self, events: &mut Vec<HostEvent>) {
        self.too_large = true;
        self.buf = Vec::new();
        events.push(HostEvent::Malformed(Malformed {
            kind: MalformedKind::TooLarge,
            reason: SseError::EventTooLarge {
                limit: self.max_line,
            }
            .to_string(),
        }));
    }

    fn handle_line(&mut self, line: &[u8], events: &mut Vec<HostEvent>) {
        let mut end = line.len();
        while end > 0 && matches!(line[end - 1], b'\r' | b'\n') {
            end -= 1;
        }
        let Some(data) = line[..end].strip_prefix(DATA_PREFIX) else {
            return;
        };
        if data == b"[DONE]" {
            self.saw_terminator = true;
            events.push(HostEvent::Done);
            return;
        }
        // Most events are chat chunks: a typed scan of the deciding members classifies them
        // without a `Value` tree; receipts, meta events and unusual shapes are read in full.
        if let Some(e) = scan::envelope(data).filter(|e| !e.devshard_receipt && !e.devshard_meta) {
            let bytes = Bytes::copy_from_slice(data);
            events.push(if e.is_error() {
                HostEvent::Error(bytes)
            } else {
                HostEvent::Chunk(bytes)
            });
            return;
        }
        let Ok(mut envelope) = serde_json::from_slice::<Map<String, Value>>(data) else {
            events.push(HostEvent::Chunk(Bytes::copy_from_slice(data)));
            return;
        };
        if let Some(body) = envelope.remove(RECEIPT_KEY) {
            self.saw_terminator = true;
            events.push(match decode_body::<ReceiptBody>(body) {
                Ok(r) => HostEvent::Receipt(r),
                Err(reason) => malformed(MalformedKind::Receipt, reason),
            });
        } else if let Some(body) = envelope.remove(META_KEY) {
            let txs = decode_body::<MetaBody>(body)
                .and_then(|m| m.decode_txs().map_err(|e| e.to_string()));
            events.push(match txs {
                Ok(txs) => HostEvent::Meta(txs),
                Err(reason) => malformed(MalformedKind::Meta, reason),
            });
        } else if content::is_error_object(&envelope) {
            events.push(HostEvent::Error(Bytes::copy_from_slice(data)));
        } else {
            events.push(HostEvent::Chunk(Bytes::copy_from_slice(data)));
        }
    }
}

fn malformed(kind: MalformedKind, reason: String) -> HostEvent {
    HostEvent::Malformed(Malformed { kind, reason })
}

/// Decodes an event body; `null` is the zero value, as Go's `json.Unmarshal` treats it.
fn decode_body<T: serde::de::DeserializeOwned + Default>(v: Value) -> Result<T, String> {
    if v.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}
