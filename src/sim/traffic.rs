//! What happens to requests on their way to the chain's public API: the request log (per path,
//! client and server, with the last [`RECENT_REQUESTS`] requests) and the chain faults, for
//! tests of polite polling (docs/health.md §7):
//! - a fixed answer: `http_status` (+ `body`, `retry_after_s`), optionally for the next
//!   `times` requests only;
//! - an nginx `limit_req` zone per client address, as the public proxy's `api_zone`
//!   (`rate_per_min`, `burst`, `nodelay`): a request over the limit gets nginx's 503 page and
//!   no `Retry-After`. With `include_versions` the miners' `GET /v1/versions` are limited too
//!   (one zone per miner, as each miner runs its own proxy).
//!
//! Rejected requests are still logged (with their status) in the request log.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::SocketAddr,
};

use http::{Request, StatusCode};
use serde::{Deserialize, Serialize};

use super::server::{self, Reject, Resp};

/// How many recent requests the log keeps.
pub const RECENT_REQUESTS: usize = 1_000;

/// One logged request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRequest {
    pub at_ms: i64,
    /// `chain` or `host-<i>`.
    pub server: String,
    pub path: String,
    pub client: String,
    /// HTTP status of the answer.
    pub status: u16,
}

/// Request counts (`GET /sim/chain/requests`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainRequests {
    pub total: u64,
    pub by_path: BTreeMap<String, u64>,
    pub by_client: BTreeMap<String, u64>,
    pub by_server: BTreeMap<String, u64>,
    pub by_client_path: BTreeMap<String, BTreeMap<String, u64>>,
    /// The last [`RECENT_REQUESTS`] requests, oldest first.
    pub recent: VecDeque<ChainRequest>,
}

impl ChainRequests {
    pub(crate) fn record(&mut self, entry: ChainRequest) {
        let log = self;
        log.total += 1;
        *log.by_path.entry(entry.path.clone()).or_default() += 1;
        *log.by_client.entry(entry.client.clone()).or_default() += 1;
        *log.by_server.entry(entry.server.clone()).or_default() += 1;
        *log.by_client_path
            .entry(entry.client.clone())
            .or_default()
            .entry(entry.path.clone())
            .or_default() += 1;
        if log.recent.len() == RECENT_REQUESTS {
            log.recent.pop_front();
        }
        log.recent.push_back(entry);
    }
}

/// Client identity for the request log: the first `X-Forwarded-For` entry, else the peer IP.
pub(crate) fn client_id<B>(req: &Request<B>, peer: SocketAddr) -> String {
    req.headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| peer.ip().to_string())
}

/// Body nginx answers when `limit_req` rejects.
const NGINX_503: &str = "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n\
<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx</center>\r\n\
</body>\r\n</html>\r\n";

/// Chain API fault knobs; every knob defaults to off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainFaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    /// Number of requests the fixed answer applies to (absent = until cleared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// `limit_req` rate per client address, in requests per minute.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_min: Option<f64>,
    /// `limit_req` burst (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Also limit miners' `GET /v1/versions`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub include_versions: bool,
}

/// nginx's per-key state: excess requests (in requests) at `last_ms`.
#[derive(Clone, Copy, Debug)]
struct Zone {
    excess: f64,
    last_ms: i64,
}

/// The active chain faults and the limiter's state.
#[derive(Debug, Default)]
pub(crate) struct ChainGate {
    faults: ChainFaults,
    zones: HashMap<(String, String), Zone>,
}

impl ChainGate {
    pub(crate) fn faults(&self) -> ChainFaults {
        self.faults.clone()
    }

    /// Replaces the faults and forgets the limiter's state.
    pub(crate) fn set(&mut self, faults: ChainFaults) {
        self.faults = faults;
        self.zones.clear();
    }

    /// The rejection for a request of `client` to `server` at `now_ms`, if any.
    pub(crate) fn check(&mut self, server: &str, client: &str, now_ms: i64) -> Option<Resp> {
        if server != "chain" && !self.faults.include_versions {
            return None;
        }
        if let Some(status) = self
            .faults
            .http_status
            .filter(|_| self.faults.times != Some(0))
        {
            if let Some(n) = self.faults.times.as_mut() {
                *n -= 1;
            }
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let text = self
                .faults
                .body
                .clone()
                .unwrap_or_else(|| status.to_string());
            let mut reject = Reject::new(status, text);
            reject.retry_after_s = self.faults.retry_after_s;
            return Some(reject.into_response());
        }
        let rate = self.faults.rate_per_min?;
        let burst = f64::from(self.faults.burst.unwrap_or(0));
        let key = (server.to_owned(), client.to_owned());
        let Some(zone) = self.zones.get_mut(&key) else {
            self.zones.insert(
                key,
                Zone {
                    excess: 0.0,
                    last_ms: now_ms,
                },
            );
            return None;
        };
        let elapsed_ms = (now_ms - zone.last_ms).max(0) as f64;
        let excess = (zone.excess - rate * elapsed_ms / 60_000.0).max(0.0) + 1.0;
        if excess > burst {
            return Some(server::response(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/html",
                server::full(NGINX_503),
            ));
        }
        *zone = Zone {
            excess,
            last_ms: now_ms,
        };
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_req_allows_burst_then_the_rate() {
        let mut gate = ChainGate::default();
        gate.set(ChainFaults {
            rate_per_min: Some(10.0),
            burst: Some(2),
            ..ChainFaults::default()
        });
        let ok = |g: &mut ChainGate, t: i64| g.check("chain", "1.2.3.4", t).is_none();
        // First request, then a burst of 2 at the same instant, then rejected.
        assert!(ok(&mut gate, 0) && ok(&mut gate, 0) && ok(&mut gate, 0));
        assert!(!ok(&mut gate, 0));
        // 10/min: one more request every 6 s.
        assert!(!ok(&mut gate, 5_000));
        assert!(ok(&mut gate, 6_000));
        assert!(
            gate.check("chain", "5.6.7.8", 6_000).is_none(),
            "per client"
        );
        assert!(
            gate.check("host-1", "1.2.3.4", 6_000).is_none(),
            "versions not limited"
        );
    }

    #[test]
    fn fixed_answer_for_the_next_requests() {
        let mut gate = ChainGate::default();
        gate.set(ChainFaults {
            http_status: Some(429),
            retry_after_s: Some(30),
            times: Some(1),
            ..ChainFaults::default()
        });
        let resp = gate.check("chain", "c", 0).unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], "30");
        assert!(gate.check("chain", "c", 0).is_none());
    }
}
