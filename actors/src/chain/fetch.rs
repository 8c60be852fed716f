//! One poll request over awc. awc is `!Send`: the client is created lazily per thread, and the
//! future runs on the poller's arbiter. The answer is classified once, here: success (the body),
//! throttled (429/503, with the parsed `Retry-After`), or failed.

use std::time::Duration;

use awc::error::SendRequestError;
use bytes::Bytes;

use super::backoff::RetryAfter;

/// Largest body read (a network-wide participants list with ML nodes).
const MAX_BODY: usize = 16 * 1024 * 1024;
const USER_AGENT: &str = concat!(
    "devshard-gateway/",
    env!("CARGO_PKG_VERSION"),
    " chain-poller"
);

/// How a poll request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// HTTP 200 and its body.
    Ok(Bytes),
    /// 429 or 503: back off.
    Throttled {
        status: u16,
        retry_after: Option<RetryAfter>,
    },
    /// Anything else: `status` is the metric label (`404`, `transport`, `timeout`, …).
    Failed { status: String, error: String },
}

impl Fetched {
    /// The `status` label of `chain_poll_requests_total`.
    pub fn status_label(&self) -> String {
        match self {
            Fetched::Ok(_) => "200".to_owned(),
            Fetched::Throttled { status, .. } => status.to_string(),
            Fetched::Failed { status, .. } => status.clone(),
        }
    }
}

fn failed(status: &str, error: impl ToString) -> Fetched {
    Fetched::Failed {
        status: status.to_owned(),
        error: error.to_string(),
    }
}

/// `GET url` with a total timeout.
pub async fn get(url: String, timeout: Duration) -> Fetched {
    let request = crate::host::client::client()
        .get(&url)
        .insert_header((awc::http::header::USER_AGENT, USER_AGENT))
        .insert_header((awc::http::header::ACCEPT, "application/json"))
        .timeout(timeout);
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(SendRequestError::Timeout) => {
            return failed("timeout", format!("no answer within {timeout:?}"))
        }
        Err(e) => match crate::tls::tls_failure(&e) {
            Some(reason) => return failed("tls", reason),
            None => return failed("transport", e),
        },
    };
    let status = response.status().as_u16();
    if crate::host::error::is_throttling(status) {
        let retry_after = response
            .headers()
            .get(awc::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(RetryAfter::parse);
        return Fetched::Throttled {
            status,
            retry_after,
        };
    }
    let body = match tokio::time::timeout(timeout, response.body().limit(MAX_BODY)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return failed("transport", format!("reading the body: {e}")),
        Err(_) => return failed("timeout", format!("body not read within {timeout:?}")),
    };
    if status != 200 {
        let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
        return failed(
            &status.to_string(),
            format!("HTTP {status}: {}", text.trim()),
        );
    }
    Fetched::Ok(body)
}
