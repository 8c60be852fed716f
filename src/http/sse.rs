//! The streaming answer: the race's channel of already-framed SSE bytes (`data: …\n\n`, ending
//! with `data: [DONE]\n\n`) becomes the response body as is. Headers follow docs/architecture.md §6:
//! `text/event-stream`, `Cache-Control: no-cache` and `Content-Encoding: identity` (without the
//! last one a compression middleware would buffer small chunks). When the client goes away,
//! actix-web drops the body, which drops the receiver: the race sees its sender closed.
//!
//! [`InFlight`] travels with the body, so the concurrent-race permit and the in-flight gauge are
//! released exactly when the response ends (streams) or is built (whole answers).

use std::convert::Infallible;

use actix_web::{http::header, HttpResponse};
use bytes::Bytes;
use prometheus::IntGauge;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

/// `Content-Type` of SSE.
pub const EVENT_STREAM: &str = "text/event-stream";
/// Tells nginx-style proxies not to buffer the stream.
const HEADER_ACCEL_BUFFERING: &str = "x-accel-buffering";

/// One race in flight: holds a permit of the concurrent-race limit and counts in the gauge.
#[derive(Debug)]
pub struct InFlight {
    _permit: OwnedSemaphorePermit,
    gauge: IntGauge,
}

impl InFlight {
    pub fn new(permit: OwnedSemaphorePermit, gauge: IntGauge) -> InFlight {
        gauge.inc();
        InFlight {
            _permit: permit,
            gauge,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// 200 `text/event-stream` whose body is every chunk of `rx`, unchanged.
pub fn stream_response(rx: mpsc::Receiver<Bytes>, in_flight: InFlight) -> HttpResponse {
    let body = futures::stream::unfold((rx, in_flight), |(mut rx, guard)| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<Bytes, Infallible>(chunk), (rx, guard)))
    });
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, EVENT_STREAM))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_ENCODING, "identity"))
        .insert_header((HEADER_ACCEL_BUFFERING, "no"))
        .streaming(body)
}
