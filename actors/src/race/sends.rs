//! An attempt's sends: the catch-up prelude its host needs first, then the inference POST, and
//! the same nonce once more when the host answers a nonce gap (optimistic catch-up: each diff is
//! sent to a host once, so a body can overtake the one carrying the diffs before it).
//!
//! The grant carries encoded bodies and the escrow's [`RequestSigner`](crate::host::RequestSigner),
//! never signatures: each POST is signed as it leaves, so a host far behind (thousands of diffs
//! over a slow link) is caught up chunk after chunk with fresh timestamps and never answers 401
//! drift. Each chunk's receipt goes to the escrow (the host's sync point moves with it). Log
//! stages `catch_up_chunk_sent`, `attempt_caught_up`; metric
//! `devshard_catch_up_chunks_total{path="attempt",result}`.

use bytes::Bytes;
use slog::{debug, info, warn};
use tokio::time::timeout;

use super::attempt::AttemptTask;
use crate::{
    escrow::messages::{AttemptReceipt, Prelude, ResendGrant},
    host::{
        client::{self, InferenceStream},
        HostError, Rejection,
    },
    metrics::ActorMetrics,
    outcome::AttemptEnd,
    protocol::sse::HostEvent,
};

impl AttemptTask {
    /// The body's turn on its host's link (`escrow/links.rs`), then the prelude and the
    /// inference POST (within the receipt timeout): its open stream. A nonce gap (the host lacks
    /// diffs an earlier body carried, or lost its session), answered to the inference POST or to
    /// a catch-up chunk before it, tells the link by how much the body overtook the one it
    /// depended on, and sends the same nonce once more, from what the host says it holds (a
    /// chunk's gap ended the attempt: the hour-long run's host restarted empty failed every
    /// request whose grant carried a chunk).
    pub(super) async fn send_request(&self) -> Result<InferenceStream, AttemptEnd> {
        if let Some(link) = &self.grant.link {
            link.ready().await;
        }
        let sent = match self.send_prelude(&self.grant.prelude).await {
            Ok(()) => self.open(self.grant.request.clone()).await,
            Err(end) => Err(end),
        };
        match sent {
            Err(AttemptEnd::Host(e)) => match e.rejection().and_then(Rejection::host_holds) {
                Some(holds) => {
                    if let Some(link) = &self.grant.link {
                        link.overtaken(holds);
                    }
                    self.resend(holds, e).await
                }
                None => Err(AttemptEnd::Host(e)),
            },
            other => other,
        }
    }

    /// Sends the nonce again with every diff above `holds` (log stage `attempt_resent`, metric
    /// `devshard_gap_resends_total{result}`); the gap itself is the error when the escrow has
    /// no bodies for it.
    async fn resend(&self, holds: u64, gap: HostError) -> Result<InferenceStream, AttemptEnd> {
        let ask = ResendGrant {
            nonce: self.grant.nonce,
            host: self.grant.host.clone(),
            holds,
        };
        let resend = match self.escrow.send(ask).await {
            Ok(Ok(resend)) => resend,
            Ok(Err(e)) => {
                info!(self.log, "no resend after the host's nonce gap"; "stage" => "attempt_resend_refused",
                    "nonce" => self.grant.nonce, "host" => self.grant.host.short(), "holds" => holds,
                    "error" => %e);
                return Err(AttemptEnd::Host(gap));
            }
            Err(_) => return Err(AttemptEnd::Host(gap)),
        };
        let sent = match self.send_prelude(&resend.prelude).await {
            Ok(()) => self.open(resend.request).await,
            Err(end) => Err(end),
        };
        let result = if sent.is_ok() { "ok" } else { "failed" };
        self.metrics.gap_resends.with_label_values(&[result]).inc();
        info!(self.log, "nonce sent again after the host's nonce gap"; "stage" => "attempt_resent",
            "nonce" => self.grant.nonce, "host" => self.grant.host.short(), "holds" => holds,
            "chunks" => resend.prelude.len(), "result" => result);
        sent
    }

    /// Catch-up chunks, in order (those below the diff window read from the store as each
    /// leaves); each receipt goes to the escrow. A chunk the store cannot give back ends the
    /// attempt as the escrow's failure, never the host's (log stage `catch_up_read_failed`).
    async fn send_prelude(&self, prelude: &Prelude) -> Result<(), AttemptEnd> {
        let chunks = prelude.len();
        let started = tokio::time::Instant::now();
        for (i, chunk) in prelude.chunks().enumerate() {
            let chunk = chunk.map_err(|e| {
                warn!(self.log, "a catch-up chunk could not be read from the store"; "stage" => "catch_up_read_failed",
                    "nonce" => self.grant.nonce, "host" => self.grant.host.short(), "error" => %e);
                AttemptEnd::EscrowGone
            })?;
            let sent = self.catch_up(&chunk).await;
            count_chunk("attempt", &self.metrics, sent.as_ref().err());
            sent.map_err(|e| match e {
                CatchUpError::Host(e) => AttemptEnd::Host(e),
                CatchUpError::Rejected(end) => end,
            })?;
            debug!(self.log, "catch-up chunk sent"; "stage" => "catch_up_chunk_sent",
                "nonce" => self.grant.nonce, "chunk" => i + 1, "of" => chunks);
        }
        if chunks > 0 {
            info!(self.log, "host caught up before its inference"; "stage" => "attempt_caught_up",
                "nonce" => self.grant.nonce, "host" => self.grant.host.short(), "chunks" => chunks,
                "elapsed_ms" => u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        }
        Ok(())
    }

    /// The inference POST of `body`, within the receipt timeout.
    async fn open(&self, body: Bytes) -> Result<InferenceStream, AttemptEnd> {
        let wait = self.limits.receipt_timeout;
        let open = client::open_inference(&self.grant.url, body, &self.grant.signer, wait);
        match timeout(wait, open).await {
            Ok(Ok(s)) => Ok(s.with_line_limit(self.limits.sse_max_line_bytes)),
            Ok(Err(e)) => Err(AttemptEnd::Host(e)),
            Err(_) => Err(AttemptEnd::Host(HostError::Timeout(wait))),
        }
    }

    /// Sends one catch-up chunk (no payload) and reports its receipt to the escrow.
    async fn catch_up(&self, body: &Bytes) -> Result<(), CatchUpError> {
        let wait = self.limits.receipt_timeout;
        let mut s = client::open_inference(&self.grant.url, body.clone(), &self.grant.signer, wait)
            .await
            .map_err(CatchUpError::Host)?
            .with_line_limit(self.limits.sse_max_line_bytes);
        while let Some(events) = s.next_events().await.map_err(CatchUpError::Host)? {
            for e in events {
                if let HostEvent::Receipt(receipt) = e {
                    let msg = AttemptReceipt {
                        nonce: self.grant.nonce,
                        catch_up: true,
                        host: self.grant.host.clone(),
                        receipt,
                    };
                    if let Ok(Err(err)) = self.escrow.send(msg).await {
                        return Err(CatchUpError::Rejected(AttemptEnd::ReceiptRejected(err)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Why a catch-up chunk failed.
enum CatchUpError {
    /// The host's answer or the connection.
    Host(HostError),
    /// The escrow rejected the host's receipt.
    Rejected(AttemptEnd),
}

/// Counts one catch-up chunk of `path` by its result.
fn count_chunk(path: &str, metrics: &ActorMetrics, err: Option<&CatchUpError>) {
    let result = match err {
        None => "ok",
        Some(CatchUpError::Host(e)) => chunk_result(Some(e)),
        Some(CatchUpError::Rejected(_)) => "failed",
    };
    metrics
        .catch_up_chunks
        .with_label_values(&[path, result])
        .inc();
}

/// The `result` label of a catch-up send that failed with `err` (shared by the sync and repair
/// paths).
pub fn chunk_result(err: Option<&HostError>) -> &'static str {
    match err.map(HostError::rejection) {
        None => "ok",
        Some(Some(Rejection::TimestampDrift | Rejection::BadAuth)) => "auth_rejected",
        Some(_) => "failed",
    }
}
