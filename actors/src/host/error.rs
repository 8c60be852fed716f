//! Typed host errors. This is the one place where a host's HTTP error (status, `X-Devshard-Error`
//! header, `{"message": …}` body) is turned into a typed value; everything downstream (attribution,
//! health, repair) matches on these types, never on substrings.

use std::time::Duration;

use serde::Serialize;

/// What a host's non-200 answer means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rejection {
    /// 401 `timestamp drift Ns exceeds maximum 30s`.
    TimestampDrift,
    /// 401 other auth failures (bad hex, bad signature, missing headers).
    BadAuth,
    /// 403 `restricted to escrow owner`.
    NotEscrowOwner,
    /// 403 `sender not in group`.
    NotInGroup,
    /// 404 (route not mounted / no devshard on that host).
    RouteNotFound,
    /// 404 `session not found` on the session GET endpoints.
    SessionNotFound,
    /// 500 `escrow not found`.
    EscrowNotFound,
    /// 500 `apply diff nonce N: post_state_root does not match computed state root…`.
    RootMismatch { nonce: Option<u64> },
    /// 500 `… invalid nonce: must be sequential: expected E, got G`.
    NonceGap {
        expected: Option<u64>,
        got: Option<u64>,
    },
    /// 503 with `X-Devshard-Error: requests_disabled`.
    RequestsDisabled,
    /// 503 with `X-Devshard-Error: initializing`.
    Initializing,
    /// 429.
    RateLimited,
    /// 503 without a devshard error header.
    Unavailable,
    /// 400.
    BadRequest,
    /// 409.
    Conflict,
    /// Anything else (mostly 5xx).
    Other,
}

/// Why a call to a host failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("connect to host failed: {0}")]
    Connect(String),
    #[error("host connection failed: {0}")]
    Transport(String),
    #[error("host did not answer within {0:?}")]
    Timeout(Duration),
    #[error("host answered {status}: {message}")]
    Status {
        status: u16,
        rejection: Rejection,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("sse stream ended without [DONE] or devshard_receipt")]
    Truncated,
    #[error("undecodable host response: {0}")]
    Decode(String),
    /// The TLS handshake failed, e.g. an untrusted certificate: the operator's configuration
    /// (`ca_file`) or the host's certificate, never counted against the host's health.
    #[error("TLS to the host failed: {0}")]
    Tls(String),
}

impl Rejection {
    /// What the host says it holds, when its rejection says so: a nonce gap names the next nonce
    /// it expects (so it holds the one before); a lost session holds nothing.
    pub fn host_holds(&self) -> Option<u64> {
        match self {
            Rejection::NonceGap {
                expected: Some(e), ..
            } => Some(e.saturating_sub(1)),
            Rejection::NonceGap { expected: None, .. } | Rejection::SessionNotFound => Some(0),
            _ => None,
        }
    }
}

impl HostError {
    /// Builds the typed error of a non-success HTTP answer.
    pub fn from_status(
        status: u16,
        body: &[u8],
        devshard_error: Option<&str>,
        retry_after: Option<Duration>,
    ) -> HostError {
        let message = error_message(body);
        let rejection = classify(status, &message, devshard_error);
        HostError::Status {
            status,
            rejection,
            message,
            retry_after,
        }
    }

    /// The typed rejection, if the host answered with an HTTP error.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            HostError::Status { rejection, .. } => Some(rejection),
            _ => None,
        }
    }

    /// `Retry-After` the host asked for.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HostError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A status (of a host's answer or its error event) that blames the request itself (4xx).
pub fn blames_request(status: u16) -> bool {
    (400..500).contains(&status)
}

/// An upstream answer (host or chain API) that asks to back off: 429 or 503.
pub fn is_throttling(status: u16) -> bool {
    matches!(status, 429 | 503)
}

/// Extracts the `message` of an Echo error body, or the body text itself.
pub fn error_message(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Echo {
        message: String,
    }
    match serde_json::from_slice::<Echo>(body) {
        Ok(e) => e.message,
        Err(_) => String::from_utf8_lossy(body)
            .trim()
            .chars()
            .take(512)
            .collect(),
    }
}

fn classify(status: u16, message: &str, devshard_error: Option<&str>) -> Rejection {
    let m = message.to_ascii_lowercase();
    match status {
        401 if m.contains("timestamp drift") => Rejection::TimestampDrift,
        401 => Rejection::BadAuth,
        403 if m.contains("restricted to escrow owner") => Rejection::NotEscrowOwner,
        403 => Rejection::NotInGroup,
        404 if m.contains("session not found") => Rejection::SessionNotFound,
        404 => Rejection::RouteNotFound,
        400 => Rejection::BadRequest,
        409 => Rejection::Conflict,
        429 => Rejection::RateLimited,
        503 => match devshard_error {
            Some("requests_disabled") => Rejection::RequestsDisabled,
            Some("initializing") => Rejection::Initializing,
            _ => Rejection::Unavailable,
        },
        500 if m.contains("escrow not found") => Rejection::EscrowNotFound,
        500 if m.contains("post_state_root does not match computed state root") => {
            Rejection::RootMismatch {
                nonce: number_after(&m, "apply diff nonce "),
            }
        }
        500 if m.contains("invalid nonce: must be sequential") => Rejection::NonceGap {
            expected: number_after(&m, "expected "),
            got: number_after(&m, "got "),
        },
        _ => Rejection::Other,
    }
}

fn number_after(text: &str, marker: &str) -> Option<u64> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rej(status: u16, msg: &str, hdr: Option<&str>) -> Rejection {
        let body = serde_json::json!({ "message": msg }).to_string();
        HostError::from_status(status, body.as_bytes(), hdr, None)
            .rejection()
            .cloned()
            .unwrap()
    }

    #[test]
    fn classifies_upstream_texts() {
        assert_eq!(
            rej(401, "timestamp drift 45s exceeds maximum 30s", None),
            Rejection::TimestampDrift
        );
        assert_eq!(
            rej(403, "restricted to escrow owner", None),
            Rejection::NotEscrowOwner
        );
        assert_eq!(rej(403, "sender not in group", None), Rejection::NotInGroup);
        assert_eq!(
            rej(500, "escrow not found", None),
            Rejection::EscrowNotFound
        );
        assert_eq!(
            rej(503, "requests disabled", Some("requests_disabled")),
            Rejection::RequestsDisabled
        );
        assert_eq!(
            rej(500, "apply diff nonce 7: post_state_root does not match computed state root: diff aa, computed bb", None),
            Rejection::RootMismatch { nonce: Some(7) }
        );
        assert_eq!(
            rej(
                500,
                "apply diff nonce 9: invalid nonce: must be sequential: expected 3, got 9",
                None
            ),
            Rejection::NonceGap {
                expected: Some(3),
                got: Some(9)
            }
        );
        assert_eq!(
            rej(404, "session not found", None),
            Rejection::SessionNotFound
        );
        let gap = rej(
            500,
            "invalid nonce: must be sequential: expected 4001, got 5001",
            None,
        );
        assert_eq!(
            gap.host_holds(),
            Some(4000),
            "only as far back as the host holds"
        );
        assert_eq!(Rejection::SessionNotFound.host_holds(), Some(0));
        assert_eq!(Rejection::TimestampDrift.host_holds(), None);
        assert_eq!(error_message(b"404 page not found"), "404 page not found");
    }
}
