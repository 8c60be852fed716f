//! An attempt's sends: the catch-up prelude its host needs first, then the inference POST.
//!
//! The grant carries encoded bodies and the escrow's [`RequestSigner`](crate::host::RequestSigner),
//! never signatures: each POST is signed as it leaves, so a host far behind (thousands of diffs
//! over a slow link) is caught up chunk after chunk with fresh timestamps and never answers 401
//! drift. Each chunk's receipt goes to the escrow (the host's sync point moves with it). Log
//! stages `catch_up_chunk_sent`, `attempt_caught_up`; metric
//! `devshard_catch_up_chunks_total{path="attempt",result}`.

use bytes::Bytes;
use slog::{debug, info};
use tokio::time::timeout;

use super::attempt::AttemptTask;
use crate::{
    escrow::messages::AttemptReceipt,
    host::{
        client::{self, InferenceStream},
        HostError, Rejection,
    },
    metrics::ActorMetrics,
    outcome::AttemptEnd,
    protocol::sse::HostEvent,
};

impl AttemptTask {
    /// The prelude, then the inference POST (within the receipt timeout): its open stream.
    pub(super) async fn send_request(&self) -> Result<InferenceStream, AttemptEnd> {
        let chunks = self.grant.prelude.len();
        let started = tokio::time::Instant::now();
        for (i, chunk) in self.grant.prelude.iter().enumerate() {
            let sent = self.catch_up(chunk).await;
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
        let wait = self.limits.receipt_timeout;
        let open = client::open_inference(
            &self.grant.url,
            self.grant.request.clone(),
            &self.grant.signer,
            wait,
        );
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
