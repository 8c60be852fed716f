//! Applying schedule steps through the simulator's control API, and the bookkeeping of a round
//! that the shared-fault check needs (which hosts suffered only a shared fault, their health
//! before it).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use super::{
    http::Http,
    schedule::{Event, Step},
};

/// One participant as `GET /v1/admin/participants` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerHealth {
    pub state: String,
    pub ejections: u64,
    /// Unix ms (0 when never ejected).
    pub ejected_until: i64,
    /// Its attempts that succeeded, ever (`outcomes.success`).
    pub successes: u64,
    /// Its last strikes as the gateway lists them (`recent_strikes`), spelled for a violation
    /// message by [`strikes_seen`].
    pub recent_strikes: Vec<String>,
}

/// A participant's `recent_strikes`, newest first, each as `reason (escrow E, N ms before the
/// read at now_ms)`: what a violation of invariant 3 names, so that a CI run without the data
/// directory still says what struck the host.
pub fn strikes_seen(recent: &Value, now_ms: i64) -> Vec<String> {
    let notes = recent.as_array().map(Vec::as_slice).unwrap_or_default();
    notes
        .iter()
        .rev()
        .map(|n| {
            let ago = now_ms.saturating_sub(n["at_ms"].as_i64().unwrap_or(0));
            let reason = n["reason"].as_str().unwrap_or("?");
            let escrow = n["escrow"].as_str().unwrap_or("?");
            format!("{reason} (escrow {escrow}, {ago} ms before the read)")
        })
        .collect()
}

/// `{address: health}`.
pub type Health = BTreeMap<String, PeerHealth>;

/// Steers the simulator; remembers what a clear must undo.
pub struct Applier {
    http: Http,
    control: String,
    /// The escrows the checks follow now (`checks/escrows.rs`).
    escrows: Vec<String>,
    addresses: Vec<String>,
    latencies: Vec<Value>,
    baseline: Option<Health>,
    /// The round's shared fault events: their hosts, and whether the knob can carry a strike
    /// (`spared.rs`). Judged one by one: a host of a later event answered while an earlier one
    /// failed.
    shared: Vec<(BTreeSet<String>, bool)>,
    excluded: BTreeSet<String>,
    /// How long the round's knobs still act after the clear (`residual_ms`).
    residual_ms: u64,
    /// Hosts restarted empty since the last clear ([`Applier::take_all_restarted`]).
    restarted: BTreeSet<usize>,
}

impl Applier {
    pub async fn new(http: Http, control: String, escrow: String) -> Applier {
        let hosts = http
            .call("GET", &format!("{control}/sim/hosts"), None)
            .await
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        Applier {
            addresses: hosts
                .iter()
                .map(|h| h["address"].as_str().unwrap_or_default().to_owned())
                .collect(),
            latencies: hosts.iter().map(|h| h["latency"].clone()).collect(),
            http,
            control,
            escrows: vec![escrow],
            baseline: None,
            shared: Vec::new(),
            excluded: BTreeSet::new(),
            residual_ms: 0,
            restarted: BTreeSet::new(),
        }
    }

    /// Follows these escrows from now on (the checker's list, after a rotation).
    pub fn set_escrows(&mut self, escrows: &[String]) {
        if !escrows.is_empty() {
            self.escrows = escrows.to_vec();
        }
    }

    pub fn hosts(&self) -> usize {
        self.addresses.len()
    }

    fn address(&self, host: usize) -> String {
        self.addresses.get(host).cloned().unwrap_or_default()
    }

    async fn put(&self, path: &str, body: &Value) -> String {
        match self
            .http
            .call("PUT", &format!("{}{path}", self.control), Some(body))
            .await
        {
            Ok(_) => String::new(),
            Err(e) => format!("{path}: {e}; "),
        }
    }

    /// Whether the participants' health must be read before `step` (first shared fault of a round).
    pub fn needs_baseline(&self, step: &Step) -> bool {
        self.baseline.is_none() && matches!(step.event, Event::HostFaults { shared: true, .. })
    }

    /// Applies a fault step; returns what went wrong talking to the simulator (empty if nothing).
    pub async fn apply(&mut self, step: &Step, baseline: Option<Health>) -> String {
        if let Some(b) = baseline {
            self.baseline = Some(b);
        }
        let mut errors = String::new();
        match &step.event {
            Event::HostFaults {
                hosts,
                faults,
                shared,
            } => {
                self.residual_ms = self.residual_ms.max(residual_ms(faults));
                if *shared {
                    let can_strike = super::spared::knob_can_strike(faults);
                    self.shared.push((BTreeSet::new(), can_strike));
                }
                for h in hosts {
                    errors += &self.put(&format!("/sim/hosts/{h}/faults"), faults).await;
                    let address = self.address(*h);
                    if let (true, Some((event, _))) = (*shared, self.shared.last_mut()) {
                        event.insert(address);
                    } else {
                        self.excluded.insert(address);
                    }
                }
            }
            Event::Fork { host, ahead } => {
                // The knob forks whichever session reaches the nonce first: the lowest of the
                // escrows followed, so that it trips soon after a rotation too.
                let mut nonce = None;
                for escrow in &self.escrows {
                    let url = format!("{}/sim/hosts/{host}/sessions/{escrow}", self.control);
                    let at = self.http.call("GET", &url, None).await.ok();
                    let at = at.and_then(|v| v["latest_nonce"].as_u64()).unwrap_or(0);
                    nonce = Some(nonce.map_or(at, |n: u64| n.min(at)));
                }
                let nonce = nonce.unwrap_or(0);
                errors += &self
                    .put(
                        &format!("/sim/hosts/{host}/faults"),
                        &json!({"fork_from_nonce": nonce + ahead}),
                    )
                    .await;
                self.excluded.insert(self.address(*host));
            }
            Event::RestartEmpty { hosts } => {
                self.restarted.extend(hosts.iter().copied());
                for h in hosts {
                    errors += &self
                        .put(
                            &format!("/sim/hosts/{h}/faults"),
                            &json!({"forget_session": true}),
                        )
                        .await;
                    self.excluded.insert(self.address(*h));
                }
            }
            Event::ClockSkew { hosts, seconds } => {
                for h in hosts {
                    errors += &self
                        .put(
                            &format!("/sim/hosts/{h}/faults"),
                            &json!({"clock_skew_s": seconds}),
                        )
                        .await;
                    self.excluded.insert(self.address(*h));
                }
            }
            Event::Slow { host, latency } => {
                errors += &self
                    .put(&format!("/sim/hosts/{host}/latency"), latency)
                    .await;
                self.excluded.insert(self.address(*host));
            }
            Event::ChainFault { faults } => errors += &self.put("/sim/chain/faults", faults).await,
            Event::Kill9 | Event::Clear => {}
        }
        errors
    }

    /// Every host fault, latency override and chain fault off; forked hosts restart empty (the
    /// only way out of a fork), so that the repair loop can bring them back.
    pub async fn clear(&self) {
        let c = &self.control;
        for i in 0..self.hosts() {
            let mut forked = false;
            for escrow in &self.escrows {
                let url = format!("{c}/sim/hosts/{i}/sessions/{escrow}");
                let session = self.http.call("GET", &url, None).await;
                forked |= session.is_ok_and(|v| !v["forked_at"].is_null());
            }
            if forked {
                let _ = self
                    .put(
                        &format!("/sim/hosts/{i}/faults"),
                        &json!({"forget_session": true}),
                    )
                    .await;
            }
            if let Some(l) = self.latencies.get(i) {
                let _ = self.put(&format!("/sim/hosts/{i}/latency"), l).await;
            }
        }
        let _ = self
            .http
            .call("DELETE", &format!("{c}/sim/faults"), None)
            .await;
        let _ = self
            .http
            .call("DELETE", &format!("{c}/sim/chain/faults"), None)
            .await;
    }

    /// The round's baseline and the hosts its shared-fault check judges (`spared.rs`), with the
    /// participants read at the clear; resets the round.
    pub fn take_shared_round(&mut self, at_clear: &Health) -> (Health, Vec<String>) {
        let baseline = self.baseline.take().unwrap_or_default();
        let round = super::spared::Round {
            excluded: &self.excluded,
            all: &self.addresses,
            baseline: &baseline,
            at_clear,
            now_ms: super::checks::now_ms(),
        };
        let hosts = round.judged(&self.shared);
        self.shared.clear();
        self.excluded.clear();
        (baseline, hosts)
    }

    /// How long the round's knobs still act on requests the hosts took before the clear; reset.
    /// Whether every host restarted empty since the last clear (then no host holds any
    /// escrow's state, and invariant 3's clock starts when one holds it again:
    /// `Checker::wait_state_back`). Resets the record.
    pub fn take_all_restarted(&mut self) -> bool {
        let all = !self.addresses.is_empty() && self.restarted.len() >= self.addresses.len();
        self.restarted.clear();
        all
    }

    pub fn take_residual(&mut self) -> Duration {
        Duration::from_millis(std::mem::take(&mut self.residual_ms))
    }

    /// Waits (bounded) until every simulated host listens again (`down_for_ms` ended).
    pub async fn wait_hosts_up(&self, limit: Duration) {
        let started = Instant::now();
        while started.elapsed() < limit {
            let all_up = self
                .http
                .call("GET", &format!("{}/sim/hosts", self.control), None)
                .await
                .ok()
                .and_then(|v| v.as_array().map(|a| a.iter().all(|h| h["up"] != false)))
                .unwrap_or(false);
            if all_up {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A repair tick now for every participant the gateway is repairing.
    pub async fn trigger_repairs(&self, gateway: &str) {
        for id in &self.escrows {
            let escrow = format!("{gateway}/v1/admin/escrows/{id}");
            let Ok(e) = self.http.call("GET", &escrow, None).await else {
                continue;
            };
            let repairs = e["snapshot"]["repairs"].as_array().cloned();
            for a in repairs.unwrap_or_default() {
                if let Some(a) = a.as_str() {
                    let repair = format!("{escrow}/participants/{a}/repair");
                    let _ = self.http.call("POST", &repair, None).await;
                }
            }
        }
    }
}

/// The race's stall timeout in the chaos gateway's config (`process.rs`): a stream stalled for
/// good is cut after it.
const STALL_TIMEOUT_MS: u64 = 8_000;

/// How long a knob keeps acting after it is cleared, on the requests a host took before: a
/// stall before the receipt or the first token, a stall mid-stream (for good without
/// `stall_ms`: until the race's stall timeout). Invariant 3's "once the faults
/// clear" starts when they stopped acting (the rotating hour-long run, clear at 454 s: every host
/// stalled 2.6 s before its receipt, the in-flight requests held the whole concurrency limit
/// until 2.6 s after the clear, and the recovery probe queued behind them).
pub fn residual_ms(knob: &Value) -> u64 {
    let ms = |name: &str| knob[name].as_u64().unwrap_or(0);
    let stall = if knob["stall_after_chunks"].is_u64() {
        knob["stall_ms"].as_u64().unwrap_or(STALL_TIMEOUT_MS)
    } else {
        0
    };
    [
        ms("stall_before_receipt_ms"),
        ms("first_token_delay_ms"),
        stall,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_violation_names_the_host_s_last_strikes_newest_first() {
        let listed = json!([
            {"at_ms": 1_000, "escrow": "1", "reason": "connect_failed"},
            {"at_ms": 1_900, "escrow": "2", "reason": "empty_stream"},
        ]);
        assert_eq!(
            strikes_seen(&listed, 2_000),
            [
                "empty_stream (escrow 2, 100 ms before the read)",
                "connect_failed (escrow 1, 1000 ms before the read)",
            ]
        );
        assert!(
            strikes_seen(&Value::Null, 2_000).is_empty(),
            "an older gateway"
        );
    }

    #[test]
    fn seed_long_1_a_stall_acts_past_the_clear_for_its_length() {
        assert_eq!(
            residual_ms(&json!({"stall_before_receipt_ms": 2_556})),
            2_556
        );
        assert_eq!(
            residual_ms(&json!({"first_token_delay_ms": 900, "times": 2})),
            900
        );
        let mid = json!({"stall_after_chunks": 2, "stall_ms": 5_000});
        assert_eq!(residual_ms(&mid), 5_000);
        assert_eq!(
            residual_ms(&json!({"stall_after_chunks": 0})),
            STALL_TIMEOUT_MS
        );
        assert_eq!(
            residual_ms(&json!({"late_finish_ms": 2_000})),
            0,
            "the answer is out"
        );
        assert_eq!(residual_ms(&json!({"refuse_connections": true})), 0);
    }
}
