//! The HTTP side of request accounting ([`crate::state::accounting`]): answers to idempotent
//! retries ([`replay`]) and the recording SSE body ([`recording_stream`]), which keeps a bounded
//! copy of the bytes for replay. `GET /v1/requests/{request_id}` is in [`super::ledger`].

use std::convert::Infallible;

use actix_web::{
    http::{header, StatusCode},
    HttpResponse,
};
use bytes::{Bytes, BytesMut};
use devshard_actors::clock::SharedClock;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::{shaping::Strip, sse::InFlight, sse::EVENT_STREAM};
use crate::{
    state::accounting::{Accounting, Outcome, Stored},
    state::AppState,
};

/// Header set on answers replayed to an idempotent retry (value: the first request's id).
pub const HEADER_REPLAYED_FROM: &str = "x-idempotent-replayed-from";

fn error(status: StatusCode, code: &str, message: String) -> HttpResponse {
    let kind = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    HttpResponse::build(status).json(json!({"error": {
        "message": message, "type": kind, "param": null, "code": code,
    }}))
}

/// 422 `idempotency_key_reused`.
pub fn key_reused(first: &str) -> HttpResponse {
    error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
        format!("this Idempotency-Key was used by request {first} with a different body, model or caller"),
    )
}

/// The answer of a retry joining `request_id`: waits for it to end, then its stored answer
/// (200), its error, or 409 `idempotent_replay_unavailable`.
pub async fn replay(
    acc: &Accounting,
    request_id: &str,
    mut done: watch::Receiver<bool>,
    escrow: &mut Option<String>,
) -> HttpResponse {
    // A closed sender means the record was dropped: answer from whatever is left.
    let _ = done.wait_for(|d| *d).await;
    let Some(r) = acc.get(request_id) else {
        return error(
            StatusCode::CONFLICT,
            "idempotent_replay_unavailable",
            format!("request {request_id} is no longer in the request table"),
        );
    };
    escrow.clone_from(&r.escrow);
    let res = match (&r.outcome, r.stored) {
        (Outcome::Completed { .. }, Some(s)) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, s.content_type))
            .body(s.bytes),
        (
            Outcome::Failed {
                status,
                code,
                message,
            },
            _,
        ) => error(
            StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY),
            code,
            message.clone(),
        ),
        _ => error(
            StatusCode::CONFLICT,
            "idempotent_replay_unavailable",
            format!("the answer of request {request_id} was too large to keep for replay"),
        ),
    };
    with_replay_header(res, request_id)
}

fn with_replay_header(mut res: HttpResponse, request_id: &str) -> HttpResponse {
    if let Ok(v) = header::HeaderValue::from_str(request_id) {
        res.headers_mut()
            .insert(header::HeaderName::from_static(HEADER_REPLAYED_FROM), v);
    }
    res
}

/// Ends the record of a request whose handler was dropped before answering (the client left
/// during the race), so that joined retries do not wait forever.
pub struct AbandonGuard {
    acc: Accounting,
    clock: SharedClock,
    request_id: String,
    armed: bool,
}

impl AbandonGuard {
    pub fn new(state: &AppState, request_id: &str) -> AbandonGuard {
        AbandonGuard {
            acc: state.accounting.clone(),
            clock: state.clock.clone(),
            request_id: request_id.to_string(),
            armed: true,
        }
    }

    /// The handler answered: its result ends the record.
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if self.armed {
            let outcome = Outcome::Failed {
                status: 499,
                code: "client_closed".into(),
                message: "the client left before the answer".into(),
            };
            self.acc
                .finish(&self.request_id, outcome, None, self.clock.now_ms());
        }
    }
}

/// Copies the SSE bytes of one request (≤ the replay limit; only when a retry can replay them:
/// the request carries an `Idempotency-Key`) and ends its record.
struct Tee {
    acc: Accounting,
    request_id: String,
    clock: SharedClock,
    /// Whether the bytes are kept for a replay at all.
    keep: bool,
    buf: Option<BytesMut>,
    saw_done: bool,
    finished: bool,
    _in_flight: InFlight,
}

impl Tee {
    fn push(&mut self, chunk: &Bytes) {
        let max = self.acc.config().max_replay_bytes;
        if let Some(b) = &mut self.buf {
            if b.len().saturating_add(chunk.len()) > max {
                self.buf = None;
            } else {
                b.extend_from_slice(chunk);
            }
        }
        self.saw_done = chunk.ends_with(b"[DONE]\n\n");
    }

    fn end(&mut self, client_left: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        let now = self.clock.now_ms();
        let outcome = if self.saw_done {
            Outcome::Completed { status: 200 }
        } else if client_left {
            Outcome::Failed {
                status: 499,
                code: "client_closed".into(),
                message: "the client closed the stream before it ended".into(),
            }
        } else {
            Outcome::Failed {
                status: 502,
                code: "stream_incomplete".into(),
                message: "the stream ended without [DONE]".into(),
            }
        };
        match self.buf.take() {
            None if !self.keep => self.acc.finish(&self.request_id, outcome, None, now),
            Some(b) => {
                // An exact copy: the buffer grew by doubling, and the request table keeps the
                // bytes for `max_requests` requests.
                let stored = Stored {
                    content_type: EVENT_STREAM,
                    bytes: Bytes::copy_from_slice(&b),
                };
                self.acc
                    .finish(&self.request_id, outcome, Some(stored), now);
            }
            None => self.acc.finish_truncated(&self.request_id, outcome, now),
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        self.end(true);
    }
}

/// 200 `text/event-stream` of `rx` (as `sse::stream_response`), stripped of what the client did
/// not ask for ([`Strip`]), recording the bytes.
pub fn recording_stream(
    rx: mpsc::Receiver<Bytes>,
    in_flight: InFlight,
    state: &AppState,
    request_id: &str,
    strip: Strip,
    replayable: bool,
) -> HttpResponse {
    let tee = Tee {
        acc: state.accounting.clone(),
        request_id: request_id.to_string(),
        clock: state.clock.clone(),
        keep: replayable,
        buf: replayable.then(BytesMut::new),
        saw_done: false,
        finished: false,
        _in_flight: in_flight,
    };
    let body = futures::stream::unfold((rx, tee), move |(mut rx, mut tee)| async move {
        match rx.recv().await {
            Some(chunk) => {
                let chunk = strip.event(chunk);
                tee.push(&chunk);
                Some((Ok::<Bytes, Infallible>(chunk), (rx, tee)))
            }
            None => {
                tee.end(false);
                None
            }
        }
    });
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, EVENT_STREAM))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_ENCODING, "identity"))
        .insert_header(("x-accel-buffering", "no"))
        .streaming(body)
}
