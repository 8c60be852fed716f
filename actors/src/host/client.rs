//! Calls from the gateway to devshard hosts over awc (docs/protocol.md §3).
//!
//! awc is `!Send`: a `HostClient` lives on one arbiter thread (one per thread, created lazily) and
//! its futures run there. Every POST is signed as it leaves (`X-Devshard-Signature` /
//! `X-Devshard-Timestamp`, by a [`RequestSigner`]);
//! GETs are unauthenticated. Non-200 answers become typed [`HostError`]s in one place.

use std::{cell::RefCell, time::Duration};

use bytes::Bytes;
use futures::StreamExt;

use super::{error::HostError, signer::RequestSigner};
use crate::protocol::{
    auth::{HEADER_ERROR, HEADER_SIGNATURE, HEADER_TIMESTAMP},
    proto::DevshardTx,
    sse::{self, HostEvent, SseParser},
    wire::{
        DiffRecord, InferenceRequest, MempoolResponse, ReceiptBody, SignaturesResponse,
        VerifyTimeoutRequest, VerifyTimeoutResponse,
    },
};

/// Timeouts of host calls (docs/protocol.md §3.7 `DefaultClientConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostTimeouts {
    /// Connect + response headers of an inference POST.
    pub inference_headers: Duration,
    /// Diffs without payload (catch-up, pending diffs) and GET queries.
    pub query: Duration,
    /// `verify-timeout`.
    pub verify_timeout: Duration,
}

impl Default for HostTimeouts {
    fn default() -> Self {
        HostTimeouts {
            inference_headers: Duration::from_secs(60),
            query: Duration::from_secs(30),
            verify_timeout: Duration::from_secs(180),
        }
    }
}

/// Largest host response body we read whole (catch-up answers, mempools).
const MAX_QUERY_BODY: usize = 16 * 1024 * 1024;

/// Simultaneous connections of one thread's client to all hosts. awc's default (100) would make
/// the 101st concurrent stream of a worker wait for a free connection until its receipt timeout;
/// the concurrent-race limit (`max_concurrent_races`) is what bounds host connections.
const HOST_CONNECTIONS_PER_THREAD: usize = 4096;

thread_local! {
    static CLIENT: RefCell<Option<awc::Client>> = const { RefCell::new(None) };
}

/// The thread's awc client (created on first use), shared by every caller on this thread.
pub(crate) fn client() -> awc::Client {
    CLIENT.with(|c| {
        c.borrow_mut()
            .get_or_insert_with(|| {
                crate::tls::awc_client(
                    Some(HOST_CONNECTIONS_PER_THREAD),
                    Some(Duration::from_secs(3600)),
                )
            })
            .clone()
    })
}

/// A failed send: a TLS failure (a configuration problem, see `tls.rs`), else connect/transport.
fn send_error(e: awc::error::SendRequestError) -> HostError {
    match crate::tls::tls_failure(&e) {
        Some(reason) => HostError::Tls(reason),
        None => transport(e),
    }
}

fn transport(e: impl std::fmt::Display) -> HostError {
    let text = e.to_string();
    if text.contains("Connect") || text.contains("onnection refused") {
        HostError::Connect(text)
    } else {
        HostError::Transport(text)
    }
}

fn retry_after(headers: &awc::http::header::HeaderMap) -> Option<Duration> {
    headers
        .get(awc::http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// An open inference stream: status was 200; read it with [`InferenceStream::next_events`].
pub struct InferenceStream {
    response: awc::ClientResponse,
    parser: SseParser,
}

impl InferenceStream {
    /// Next batch of parsed events; `Ok(None)` at a clean end of stream.
    pub async fn next_events(&mut self) -> Result<Option<Vec<HostEvent>>, HostError> {
        match self.response.next().await {
            Some(Ok(chunk)) => Ok(Some(self.parser.push(&chunk))),
            Some(Err(e)) => Err(HostError::Transport(e.to_string())),
            None => Ok(None),
        }
    }

    /// The same stream with another SSE line cap (before anything was read).
    pub fn with_line_limit(mut self, max_line: usize) -> Self {
        self.parser = SseParser::with_max_event_bytes(max_line);
        self
    }

    /// Whether a terminator (`[DONE]` or a receipt) was seen (upstream's truncation rule).
    pub fn finish(self) -> Result<(), HostError> {
        self.parser.finish().map_err(|_| HostError::Truncated)
    }
}

/// Signs `body` now (see `signer.rs`) and POSTs it to a session route; returns the response on
/// HTTP 200.
async fn post_signed(
    url: &str,
    body: Bytes,
    signer: &RequestSigner,
    timeout: Duration,
) -> Result<awc::ClientResponse, HostError> {
    let headers = signer.headers(&body);
    let send = client()
        .post(url)
        .insert_header((awc::http::header::CONTENT_TYPE, "application/json"))
        .insert_header((HEADER_SIGNATURE, headers.signature_hex))
        .insert_header((HEADER_TIMESTAMP, headers.timestamp))
        .timeout(timeout)
        .send_body(body);
    let mut response = send.await.map_err(send_error)?;
    check_status(&mut response).await?;
    Ok(response)
}

async fn check_status(response: &mut awc::ClientResponse) -> Result<(), HostError> {
    let status = response.status().as_u16();
    if status == 200 {
        return Ok(());
    }
    let devshard = response
        .headers()
        .get(HEADER_ERROR)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let retry = retry_after(response.headers());
    let body = response.body().limit(64 * 1024).await.unwrap_or_default();
    Err(HostError::from_status(
        status,
        &body,
        devshard.as_deref(),
        retry,
    ))
}

/// Opens an inference stream: `body` is encoded already and signed as it leaves.
pub async fn open_inference(
    url: &str,
    body: Bytes,
    signer: &RequestSigner,
    timeout: Duration,
) -> Result<InferenceStream, HostError> {
    let response = post_signed(url, body, signer, timeout).await?;
    Ok(InferenceStream {
        response,
        parser: SseParser::new(),
    })
}

/// What a payload-less send (catch-up, pending diff) returned.
#[derive(Debug, Clone, Default)]
pub struct SendResult {
    pub receipt: Option<ReceiptBody>,
    pub mempool: Vec<DevshardTx>,
}

/// Sends diffs without a payload and reads the whole answer (receipt + meta).
pub async fn send_diffs(
    url: &str,
    request: &InferenceRequest,
    signer: &RequestSigner,
    timeout: Duration,
) -> Result<SendResult, HostError> {
    let body = serde_json::to_vec(request).map_err(|e| HostError::Decode(e.to_string()))?;
    let mut response = post_signed(url, Bytes::from(body), signer, timeout).await?;
    let bytes = response
        .body()
        .limit(MAX_QUERY_BODY)
        .await
        .map_err(transport)?;
    let mut parser = SseParser::new();
    let mut result = SendResult::default();
    for event in parser.push(&bytes) {
        match event {
            HostEvent::Receipt(r) => result.receipt = Some(r),
            HostEvent::Meta(txs) => result.mempool = txs,
            _ => {}
        }
    }
    if result.receipt.is_none() {
        let legacy =
            sse::parse_legacy_body(&bytes).map_err(|e| HostError::Decode(e.to_string()))?;
        result.receipt = Some(legacy.receipt_body());
        result.mempool = legacy
            .decode_mempool()
            .map_err(|e| HostError::Decode(e.to_string()))?;
    }
    Ok(result)
}

/// `POST …/verify-timeout`.
pub async fn verify_timeout(
    url: &str,
    request: &VerifyTimeoutRequest,
    signer: &RequestSigner,
    timeout: Duration,
) -> Result<VerifyTimeoutResponse, HostError> {
    let body = serde_json::to_vec(request).map_err(|e| HostError::Decode(e.to_string()))?;
    let mut response = post_signed(url, Bytes::from(body), signer, timeout).await?;
    response
        .json()
        .limit(MAX_QUERY_BODY)
        .await
        .map_err(|e| HostError::Decode(e.to_string()))
}

async fn get_json<T: serde::de::DeserializeOwned>(
    url: &str,
    timeout: Duration,
) -> Result<T, HostError> {
    let mut response = client()
        .get(url)
        .timeout(timeout)
        .send()
        .await
        .map_err(send_error)?;
    check_status(&mut response).await?;
    response
        .json()
        .limit(MAX_QUERY_BODY)
        .await
        .map_err(|e| HostError::Decode(e.to_string()))
}

/// `GET …/signatures?nonce=N`.
pub async fn get_signatures(url: &str, timeout: Duration) -> Result<SignaturesResponse, HostError> {
    get_json(url, timeout).await
}

/// `GET …/mempool`, decoded.
pub async fn get_mempool(url: &str, timeout: Duration) -> Result<Vec<DevshardTx>, HostError> {
    let m: MempoolResponse = get_json(url, timeout).await?;
    m.decode_txs().map_err(|e| HostError::Decode(e.to_string()))
}

/// `GET …/diffs?from=A&to=B` (inclusive), as the host serves them (signatures not checked).
pub async fn get_diffs(url: &str, timeout: Duration) -> Result<Vec<DiffRecord>, HostError> {
    get_json(url, timeout).await
}
