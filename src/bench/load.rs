//! The load driver of `bench`: streaming requests, closed or open loop, and what one phase
//! measured (time to first byte, gaps between chunks and total time, sheds and other failures by
//! kind, and which escrow served each request when the gateway names it).

use std::{
    cell::RefCell,
    collections::BTreeMap,
    rc::Rc,
    time::{Duration, Instant},
};

use futures::StreamExt;

/// One phase's measurements.
pub(super) struct Phase {
    pub name: &'static str,
    pub ttfb_ms: Vec<f64>,
    /// Time between two chunks of one stream, every stream's.
    pub gaps_ms: Vec<f64>,
    pub total_ms: Vec<f64>,
    /// Served requests per escrow (`X-Devshard-Escrow`; empty on the direct path).
    pub per_escrow: BTreeMap<String, usize>,
    /// 503 + `Retry-After` (shed by the gateway's overload control, or a host's own 503).
    pub shed: usize,
    /// Any other 5xx.
    pub server_errors: usize,
    /// Answered with a 4xx.
    pub client_errors: usize,
    /// Those 4xx by status.
    pub client_statuses: BTreeMap<u16, usize>,
    /// Transport errors and broken streams.
    pub failures: usize,
    /// From the phase's start to its last answer: a shed client's `Retry-After` wait after the
    /// gateway's last answer is not the gateway's time.
    pub elapsed: Duration,
    /// When the last answer (of any kind) arrived.
    last_answer: Option<Instant>,
    pub peak_rss_kib: Option<u64>,
}

impl Phase {
    fn new(name: &'static str, n: usize) -> Phase {
        Phase {
            name,
            ttfb_ms: Vec::with_capacity(n),
            gaps_ms: Vec::new(),
            total_ms: Vec::with_capacity(n),
            per_escrow: BTreeMap::new(),
            shed: 0,
            server_errors: 0,
            client_errors: 0,
            client_statuses: BTreeMap::new(),
            failures: 0,
            elapsed: Duration::ZERO,
            last_answer: None,
            peak_rss_kib: None,
        }
    }

    /// Requests answered completely.
    pub fn served(&self) -> usize {
        self.total_ms.len()
    }

    /// Served requests per second, over the time to the phase's last answer.
    pub fn throughput(&self) -> f64 {
        self.served() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `q` quantile of time to first byte (ms; sorted when the phase ended).
    pub fn ttfb(&self, q: f64) -> f64 {
        pct(&self.ttfb_ms, q)
    }

    /// The `q` quantile of the gaps between chunks (ms).
    pub fn gap(&self, q: f64) -> f64 {
        pct(&self.gaps_ms, q)
    }

    pub fn line(&self) -> String {
        format!(
            "{:<8} requests={:<6} shed_503={:<5} other_5xx={:<4} 4xx={:<4} transport={:<4} ttfb_p50={:>7.2}ms ttfb_p99={:>7.2}ms ttfb_p99.9={:>8.2}ms gap_p99={:>7.2}ms total_p50={:>7.2}ms total_p99={:>7.2}ms throughput={:>7.0}/s peak_rss={}{}",
            self.name,
            self.served(),
            self.shed,
            self.server_errors,
            self.client_errors,
            self.failures,
            self.ttfb(0.50),
            self.ttfb(0.99),
            self.ttfb(0.999),
            self.gap(0.99),
            pct(&self.total_ms, 0.50),
            pct(&self.total_ms, 0.99),
            self.throughput(),
            self.peak_rss_kib.map_or("n/a".to_string(), |k| format!("{} MiB", k / 1024)),
            self.client_statuses
                .iter()
                .map(|(s, n)| format!(" 4xx_{s}={n}"))
                .collect::<String>(),
        )
    }
}

/// A phase's time: from its start to its last answer, or all of it when nothing answered.
fn time_to_last_answer(
    started: Instant,
    last_answer: Option<Instant>,
    elapsed: Duration,
) -> Duration {
    last_answer.map_or(elapsed, |t| t.saturating_duration_since(started))
}

/// The `q` quantile of sorted values.
fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(idx).copied().unwrap_or(f64::NAN)
}

/// How requests are started.
#[derive(Clone, Copy, Debug)]
pub(super) struct Load {
    /// At most this many in flight (closed loop: exactly this many, back to back).
    pub concurrency: usize,
    /// Open loop: request `i` is due at `i / rate` seconds after the start.
    pub rate: Option<f64>,
    /// `max_tokens` of each request.
    pub max_tokens: u32,
}

/// How one request ended.
enum Ended {
    Served {
        first: Duration,
        total: Duration,
        gaps_ms: Vec<f64>,
        escrow: Option<String>,
    },
    /// 503 with `Retry-After` (seconds).
    Shed(u64),
    ServerError,
    ClientError(u16),
    Failed,
}

/// `n` streaming requests, round-robin over `urls`. A client shed with 503 + `Retry-After`
/// waits that long before its next request, as a well-behaved client does.
pub(super) async fn drive(name: &'static str, urls: &[String], n: usize, load: Load) -> Phase {
    let concurrency = load.concurrency.max(1);
    let phase = Rc::new(RefCell::new(Phase::new(name, n)));
    let connector = awc::Connector::new().limit(concurrency * 2);
    let client = awc::Client::builder()
        .connector(connector)
        .timeout(Duration::from_secs(60))
        .finish();
    let started = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(concurrency, |i| {
            let (client, phase) = (client.clone(), phase.clone());
            let url = urls.get(i % urls.len().max(1)).cloned().unwrap_or_default();
            async move {
                if let Some(rate) = load.rate.filter(|r| *r > 0.0) {
                    let due = started + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let ended = one(&client, &url, i, load.max_tokens).await;
                let wait = {
                    let mut p = phase.borrow_mut();
                    p.last_answer = Some(Instant::now());
                    match ended {
                        Ended::Served {
                            first,
                            total,
                            gaps_ms,
                            escrow,
                        } => {
                            p.ttfb_ms.push(first.as_secs_f64() * 1e3);
                            p.total_ms.push(total.as_secs_f64() * 1e3);
                            p.gaps_ms.extend(gaps_ms);
                            if let Some(e) = escrow {
                                *p.per_escrow.entry(e).or_default() += 1;
                            }
                            None
                        }
                        Ended::Shed(s) => {
                            p.shed += 1;
                            Some(Duration::from_secs(s))
                        }
                        Ended::ServerError => {
                            p.server_errors += 1;
                            None
                        }
                        Ended::ClientError(status) => {
                            p.client_errors += 1;
                            *p.client_statuses.entry(status).or_default() += 1;
                            None
                        }
                        Ended::Failed => {
                            p.failures += 1;
                            None
                        }
                    }
                };
                if let Some(w) = wait {
                    tokio::time::sleep(w).await;
                }
            }
        })
        .await;
    let elapsed = started.elapsed();
    let mut p = match Rc::try_unwrap(phase) {
        Ok(cell) => cell.into_inner(),
        Err(rc) => std::mem::replace(&mut *rc.borrow_mut(), Phase::new(name, 0)),
    };
    p.elapsed = time_to_last_answer(started, p.last_answer, elapsed);
    p.ttfb_ms.sort_by(f64::total_cmp);
    p.gaps_ms.sort_by(f64::total_cmp);
    p.total_ms.sort_by(f64::total_cmp);
    p
}

/// The most of an error's body a client reads.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// One streaming request, timed from its actual start (the timer wheel wakes up to 1 ms late,
/// which would otherwise dominate both phases' figures).
async fn one(client: &awc::Client, url: &str, i: usize, max_tokens: u32) -> Ended {
    let body = format!(
        r#"{{"stream":true,"max_tokens":{max_tokens},"messages":[{{"role":"user","content":"bench {i}"}}]}}"#
    );
    let t0 = Instant::now();
    let sent = client
        .post(url)
        .insert_header(("Content-Type", "application/json"))
        .send_body(body)
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(_) => return Ended::Failed,
    };
    let status = resp.status();
    if !status.is_success() {
        // An error's body is read, as an OpenAI client reads it for its message: the
        // connection then stays open for the next request instead of being closed unread.
        let _ = resp.body().limit(ERROR_BODY_LIMIT).await;
    }
    if status.as_u16() == 503 {
        let retry = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        return retry.map_or(Ended::ServerError, Ended::Shed);
    }
    if status.is_server_error() {
        return Ended::ServerError;
    }
    if !status.is_success() {
        return Ended::ClientError(status.as_u16());
    }
    let escrow = resp
        .headers()
        .get("x-devshard-escrow")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (mut first, mut last, mut gaps_ms) = (None, None::<Instant>, Vec::new());
    while let Some(chunk) = resp.next().await {
        if chunk.is_err() {
            return Ended::Failed;
        }
        let now = Instant::now();
        if let Some(prev) = last {
            gaps_ms.push(now.duration_since(prev).as_secs_f64() * 1e3);
        }
        last = Some(now);
        first.get_or_insert_with(|| t0.elapsed());
    }
    match first {
        Some(first) => Ended::Served {
            first,
            total: t0.elapsed(),
            gaps_ms,
            escrow,
        },
        None => Ended::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_ends_at_its_last_answer_not_after_a_shed_client_s_wait() {
        let t0 = Instant::now();
        let last = t0 + Duration::from_millis(2_500);
        // Shed clients slept out their Retry-After for another second after the last answer.
        let all = Duration::from_millis(3_500);
        assert_eq!(
            time_to_last_answer(t0, Some(last), all),
            Duration::from_millis(2_500)
        );
        assert_eq!(time_to_last_answer(t0, None, all), all);
    }
}
