//! The gateway's `/metrics` as `bench` reads them: the figures a phase moved (diffs per request
//! body, gap resends, bodies paced on their host's link, sheds, attempts, hedges and signature
//! recoveries), as the difference of two scrapes.

use std::time::Duration;

/// One scrape of the Prometheus text exposition.
pub(super) struct Scrape(String);

impl Scrape {
    /// `GET {gateway}/metrics` (empty when unreachable: every figure reads 0).
    pub async fn fetch(gateway: &str) -> Scrape {
        let client = awc::Client::builder()
            .timeout(Duration::from_secs(30))
            .finish();
        let body = match client.get(format!("{gateway}/metrics")).send().await {
            Ok(mut r) => r.body().limit(64 << 20).await.ok(),
            Err(_) => None,
        };
        Scrape(body.map_or_else(String::new, |b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// The raw text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Sum of the samples named `name` whose labels include every `k="v"` of `labels`.
    pub fn sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
                let wanted = metric == name && labels.iter().all(|kv| rest.contains(kv));
                wanted.then(|| value.parse::<f64>().ok()).flatten()
            })
            .sum()
    }

    /// What moved between `before` and this scrape.
    pub fn since(&self, before: &Scrape) -> Figures {
        let d = |name: &str, labels: &[&str]| self.sum(name, labels) - before.sum(name, labels);
        const DIFFS: &str = "devshard_catch_up_diffs_per_request";
        const RECOVERIES: &str = "devshard_signature_recoveries_total";
        let sum = format!("{DIFFS}_sum");
        let count = format!("{DIFFS}_count");
        Figures {
            first_sends: d(&count, &[r#"send="first""#]),
            first_diffs: d(&sum, &[r#"send="first""#]),
            resends: d(&count, &[r#"send="resend""#]),
            resent_diffs: d(&sum, &[r#"send="resend""#]),
            shed_ceiling: d(
                "devshard_gateway_limit_rejections_total",
                &[r#"reason="max_concurrent_requests""#],
            ),
            shed_queue_full: d(
                "devshard_gateway_limit_rejections_total",
                &[r#"reason="queue_full""#],
            ),
            shed_queue_timeout: d(
                "devshard_gateway_limit_rejections_total",
                &[r#"reason="queue_timeout""#],
            ),
            paced: d("devshard_link_wait_seconds_count", &[r#"result="paced""#]),
            paced_seconds: d("devshard_link_wait_seconds_sum", &[r#"result="paced""#]),
            expired: d("devshard_link_wait_seconds_count", &[r#"result="expired""#]),
            overtaken: d("devshard_link_overtaken_total", &[]),
            attempts: d("devshard_attempts_total", &[]),
            hedges: d("devshard_hedges_total", &[]),
            limit: self.sum("devshard_gateway_concurrency_limit", &[]),
            recoveries_computed: d(RECOVERIES, &[r#"result="computed""#]),
            recoveries_memo: d(RECOVERIES, &[r#"result="memo""#]),
        }
    }
}

/// Counters a phase moved (see [`Scrape::since`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Figures {
    pub first_sends: f64,
    pub first_diffs: f64,
    pub resends: f64,
    pub resent_diffs: f64,
    pub shed_ceiling: f64,
    pub shed_queue_full: f64,
    pub shed_queue_timeout: f64,
    /// Bodies that waited for their turn on their host's link, and how long in all (s).
    pub paced: f64,
    pub paced_seconds: f64,
    /// Bodies that left after `link_max_wait_ms`, and gaps that showed overtaking.
    pub expired: f64,
    pub overtaken: f64,
    pub attempts: f64,
    pub hedges: f64,
    /// The adaptive limit at the second scrape.
    pub limit: f64,
    /// Signature recoveries the gateway computed, and those its memo answered.
    pub recoveries_computed: f64,
    pub recoveries_memo: f64,
}

impl Figures {
    /// Diffs per attempt, first sends and resends together.
    pub fn diffs_per_request(&self) -> f64 {
        (self.first_diffs + self.resent_diffs) / self.first_sends.max(1.0)
    }

    pub fn line(&self) -> String {
        format!(
            "gateway bodies: mean {:.2} diffs per inference request ({:.0} sent to hosts; first sends {:.2}, {:.0} nonce-gap resends of mean {:.1}); links: {:.0} paced (mean wait {:.1} ms), {:.0} expired, {:.0} overtaken; sheds: queue_full {:.0}, queue_timeout {:.0}, ceiling {:.0}; adaptive limit now {:.0}",
            self.diffs_per_request(),
            self.first_sends,
            self.first_diffs / self.first_sends.max(1.0),
            self.resends,
            self.resent_diffs / self.resends.max(1.0),
            self.paced,
            self.paced_seconds * 1e3 / self.paced.max(1.0),
            self.expired,
            self.overtaken,
            self.shed_queue_full,
            self.shed_queue_timeout,
            self.shed_ceiling,
            self.limit,
        )
    }
}
