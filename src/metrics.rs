//! Prometheus metrics of the HTTP edge.
//!
//! The registry is created once per process with the namespace [`METRICS_NAMESPACE`]
//! (`devshard`), so names match the upstream Go gateway where the concept is the same:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `devshard_http_requests_total` | counter | `path` (route pattern), `method`, `status` |
//! | `devshard_http_request_duration_seconds` | histogram (time to response head) | `path`, `method` |
//! | `devshard_gateway_inflight_requests` | gauge: races in flight | — |
//! | `devshard_gateway_race_errors_total` | counter: races failed before the first byte | `status` |
//! | `devshard_gateway_limit_rejections_total` | counter: requests refused by a limit (all answered 503 + `Retry-After`) | `reason` (`max_concurrent_requests`, `queue_full`, `queue_timeout`) |
//! | `devshard_gateway_concurrency_limit` | gauge: the adaptive limit on races starting (`crate::overload`) | — |
//! | `devshard_gateway_starting_races` | gauge: races admitted that have not started answering | — |
//! | `devshard_gateway_queued_requests` | gauge: requests waiting for a starting slot | — |
//! | `devshard_gateway_queue_wait_seconds` | histogram: time queued requests waited (admitted or shed) | — |
//! | `devshard_gateway_escrow_replacements_total` | counter: requests whose escrow closed before they started there | `result` (`replaced`: on another escrow here; `forwarded`: to another replica; `returned`: handed back to the replica that forwarded it; `no_other_escrow`: 503) |
//! | `devshard_escrow_adoptions_total` | counter: `POST /v1/admin/escrows {"adopt": true}` calls | `result` (`adopted`, `no_quorum`, `refused`) |
//! | `devshard_escrow_adopt_rejected_diffs_total` | counter: diffs a host served that an adoption rejected | `reason` (`RejectReason`) |
//! | `devshard_escrow_deletions_total` | counter: `DELETE /v1/admin/escrows/{id}` calls and the rotation's removals of settled escrows (`rotation.settled_retention_s`) | `result` (`deleted_settled`, `deleted_unused`, `retention_settled`, `refused_not_settled`, `refused_in_use`, `refused_purge`) |
//! | `devshard_escrow_pick_refusals_total` | counter: escrows passed over by admission (one per escrow refused, on a request no escrow could take) | `reason` (`PickRefusal`) |
//!
//! Labels are bounded: `path` is the matched route pattern (`/v1/admin/escrows/{id}`, or
//! `unmatched`), never a raw path, escrow id or participant address. [`HttpMetrics::register`]
//! must run once per registry (prometheus refuses a second registration).

use std::time::Instant;

use actix_web::{
    body::MessageBody,
    dev::{ServiceRequest, ServiceResponse},
    http::Method,
    middleware::Next,
    web, Error,
};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// Namespace (prefix) of every metric of the process.
pub const METRICS_NAMESPACE: &str = "devshard";
/// `path` label of requests that matched no route.
pub const UNMATCHED_PATH: &str = "unmatched";
/// Request duration buckets (seconds): from the gateway's own millisecond overhead (short answers
/// from fast hosts) to non-streaming inference that takes minutes.
const DURATION_BUCKETS: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// `reason` label of a rejection by the hard ceiling `max_concurrent_races` (upstream name).
pub const REJECT_MAX_CONCURRENT: &str = "max_concurrent_requests";

/// A registry with the process namespace.
pub fn new_registry() -> Result<Registry, prometheus::Error> {
    Registry::new_custom(Some(METRICS_NAMESPACE.to_string()), None)
}

/// Metric handles of the HTTP edge (cheap to clone; `Arc` inside).
#[derive(Clone, Debug)]
pub struct HttpMetrics {
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
    pub races_in_flight: IntGauge,
    pub race_errors: IntCounterVec,
    pub rejections: IntCounterVec,
    pub replacements: IntCounterVec,
    /// Escrows refused by admission when no escrow could take a request, by typed reason.
    pub pick_refusals: IntCounterVec,
    /// Adoptions of live escrows, by result.
    pub adoptions: IntCounterVec,
    /// Diffs rejected by adoptions, by typed reason.
    pub adopt_rejected: IntCounterVec,
    /// Escrow deletions, by result.
    pub deletions: IntCounterVec,
    /// The adaptive limit on races starting (`crate::overload`).
    pub concurrency_limit: IntGauge,
    /// Races admitted by the limiter that have not started answering.
    pub starting_races: IntGauge,
    /// Requests waiting in the limiter's queue.
    pub queued_requests: IntGauge,
    /// How long queued requests waited.
    pub queue_wait: Histogram,
}

impl HttpMetrics {
    /// Creates the metrics and registers them in `registry` (once per registry).
    pub fn register(registry: &Registry) -> Result<HttpMetrics, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests answered"),
            &["path", "method", "status"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "http_request_duration_seconds",
                "Time until the response head (streams: until the first byte)",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["path", "method"],
        )?;
        let races_in_flight = IntGauge::new("gateway_inflight_requests", "Races in flight")?;
        let race_errors = IntCounterVec::new(
            Opts::new(
                "gateway_race_errors_total",
                "Races that failed before the client got a byte, by HTTP status",
            ),
            &["status"],
        )?;
        let rejections = IntCounterVec::new(
            Opts::new(
                "gateway_limit_rejections_total",
                "Requests refused by a gateway limit",
            ),
            &["reason"],
        )?;
        let replacements = IntCounterVec::new(
            Opts::new(
                "gateway_escrow_replacements_total",
                "Requests whose escrow closed (settling) before they started there, by result",
            ),
            &["result"],
        )?;
        registry.register(Box::new(replacements.clone()))?;
        let pick_refusals = IntCounterVec::new(
            Opts::new(
                "escrow_pick_refusals_total",
                "Escrows refused by admission on requests no escrow could take, by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(pick_refusals.clone()))?;
        let adoptions = IntCounterVec::new(
            Opts::new(
                "escrow_adoptions_total",
                "Adoptions of live escrows, by result",
            ),
            &["result"],
        )?;
        registry.register(Box::new(adoptions.clone()))?;
        let adopt_rejected = IntCounterVec::new(
            Opts::new(
                "escrow_adopt_rejected_diffs_total",
                "Diffs served by hosts that an adoption rejected, by reason",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(adopt_rejected.clone()))?;
        let deletions = IntCounterVec::new(
            Opts::new(
                "escrow_deletions_total",
                "Escrow deletions by an admin or the rotation's retention of settled escrows, by result",
            ),
            &["result"],
        )?;
        registry.register(Box::new(deletions.clone()))?;
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let concurrency_limit = gauge(
            "gateway_concurrency_limit",
            "Adaptive limit on races starting (admission to first byte)",
        )?;
        let starting_races = gauge(
            "gateway_starting_races",
            "Races admitted that have not started answering",
        )?;
        let queued_requests = gauge(
            "gateway_queued_requests",
            "Requests waiting for a starting slot",
        )?;
        let queue_wait = Histogram::with_opts(
            HistogramOpts::new(
                "gateway_queue_wait_seconds",
                "Time requests waited in the overload queue (admitted or shed)",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )?;
        registry.register(Box::new(queue_wait.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(races_in_flight.clone()))?;
        registry.register(Box::new(race_errors.clone()))?;
        registry.register(Box::new(rejections.clone()))?;
        Ok(HttpMetrics {
            requests,
            duration,
            races_in_flight,
            race_errors,
            rejections,
            replacements,
            pick_refusals,
            adoptions,
            adopt_rejected,
            deletions,
            concurrency_limit,
            starting_races,
            queued_requests,
            queue_wait,
        })
    }

    /// Counts one answered request.
    pub fn observe(&self, path: &str, method: &Method, status: u16, seconds: f64) {
        let method = method_label(method);
        self.requests
            .with_label_values(&[path, method, &status_label(status)])
            .inc();
        self.duration
            .with_label_values(&[path, method])
            .observe(seconds);
    }

    /// Counts a race that failed before the first byte.
    pub fn race_error(&self, status: u16) {
        self.race_errors
            .with_label_values(&[&status_label(status)])
            .inc();
    }
}

/// Bounded `method` label.
fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// `status` label: the numeric status (bounded: `StatusCode` is always within 100..=999).
fn status_label(status: u16) -> String {
    status.to_string()
}

/// Prometheus text exposition of `registry`.
pub fn render(registry: &Registry) -> Result<String, prometheus::Error> {
    TextEncoder::new().encode_to_string(&registry.gather())
}

/// Middleware (`middleware::from_fn`): counts every request by route pattern and status.
pub async fn track(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let metrics = req.app_data::<web::Data<HttpMetrics>>().cloned();
    let method = req.method().clone();
    let started = Instant::now();
    let res = next.call(req).await;
    if let Some(m) = metrics {
        let secs = started.elapsed().as_secs_f64();
        match &res {
            Ok(r) => {
                let path = r.request().match_pattern();
                let path = path.as_deref().unwrap_or(UNMATCHED_PATH);
                m.observe(path, &method, r.status().as_u16(), secs);
            }
            Err(e) => {
                let status = e.as_response_error().status_code().as_u16();
                m.observe(UNMATCHED_PATH, &method, status, secs);
            }
        }
    }
    res
}
