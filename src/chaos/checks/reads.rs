//! The checker's reads, all through HTTP: the gateway's admin routes (escrow snapshot,
//! participants) and the simulator's control API (host sessions and addresses, open inference
//! deadlines). The judgements on what they return are in the parent module.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{now_s, Checker, HostSession, Report, Secrets};
use crate::chaos::{
    apply::{strikes_seen, Health, PeerHealth},
    lockstep::syncing,
};

impl Checker {
    pub(super) async fn admin(
        &self,
        method: &str,
        path: &str,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> Option<Value> {
        match self
            .http
            .call(method, &format!("{}{path}", self.gateway), None)
            .await
        {
            Ok(v) => {
                secrets.scan(v.to_string().as_bytes(), path, report);
                Some(v)
            }
            Err(e) => {
                report
                    .borrow()
                    .note("admin_call_failed", json!(e.to_string()));
                None
            }
        }
    }

    /// After every host restarted empty: waits (at most `limit`) until some host's session
    /// holds, for one of the escrows the checks follow, that escrow's nonce as of this call. No
    /// gateway can serve before a host holds the state again, so invariant 3's 2 s start then;
    /// a catch-up slower than `limit` is a violation of its own. Returns how long it took.
    pub async fn wait_state_back(
        &self,
        limit: std::time::Duration,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> std::time::Duration {
        let started = tokio::time::Instant::now();
        let mut targets = Vec::new();
        for escrow in &self.escrows {
            let path = format!("/v1/admin/escrows/{escrow}");
            if let Some(v) = self.admin("GET", &path, report, secrets).await {
                if let Some(nonce) = v["snapshot"]["nonce"].as_u64() {
                    targets.push((escrow.clone(), nonce));
                }
            }
        }
        'wait: while !targets.is_empty() {
            for (escrow, target) in &targets {
                if (self.sessions(escrow).await.iter()).any(|s| s.nonce >= *target) {
                    break 'wait;
                }
            }
            if started.elapsed() >= limit {
                let what = format!(
                    "no host holds any escrow's state {} s after every host restarted empty \
                     ({targets:?})",
                    limit.as_secs()
                );
                report.borrow_mut().violation(3, what);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let took = started.elapsed();
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        report
            .borrow()
            .note("state_back", json!({"after_all_restarted_empty_ms": ms}));
        took
    }

    pub(super) async fn sessions(&self, escrow: &str) -> Vec<HostSession> {
        let hosts = self
            .http
            .call("GET", &format!("{}/sim/hosts", self.control), None)
            .await
            .ok()
            .and_then(|v| v.as_array().map(Vec::len))
            .unwrap_or(0);
        let mut out = Vec::new();
        for index in 0..hosts {
            let url = format!("{}/sim/hosts/{index}/sessions/{escrow}", self.control);
            if let Ok(v) = self.http.call("GET", &url, None).await {
                out.push(HostSession {
                    index,
                    nonce: v["latest_nonce"].as_u64().unwrap_or(0),
                    root: v["state_root"].as_str().unwrap_or_default().to_owned(),
                    forked: !v["forked_at"].is_null(),
                    open: v["open_inferences"].as_array().cloned().unwrap_or_default(),
                });
            }
        }
        out
    }

    pub(super) async fn addresses(&self) -> BTreeMap<usize, String> {
        let hosts = self
            .http
            .call("GET", &format!("{}/sim/hosts", self.control), None)
            .await;
        hosts
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|h| {
                Some((
                    usize::try_from(h["index"].as_u64()?).ok()?,
                    h["address"].as_str()?.to_owned(),
                ))
            })
            .collect()
    }

    /// Seconds until the last deadline (+ slack) of an inference of `escrow` started at or
    /// before `nonce` that some host still holds open (for the final drain).
    pub async fn last_open_deadline(&self, escrow: &str, nonce: u64) -> Option<i64> {
        let d = self.deadlines;
        self.sessions(escrow)
            .await
            .iter()
            .flat_map(|s| s.open.iter())
            .filter(|r| r["id"].as_u64().is_some_and(|id| id <= nonce))
            .map(|r| match r["status"].as_str() {
                Some("started") => r["confirmed_at"].as_i64().unwrap_or(0) + d.execution_s,
                _ => r["started_at"].as_i64().unwrap_or(0) + d.refusal_s,
            })
            .max()
            .map(|due| due + d.slack_s - now_s())
    }

    /// The hosts the escrows followed catch up in the background now (`lockstep::syncing`),
    /// summed; `None` when a snapshot could not be read.
    pub async fn background_catch_ups(
        &self,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> Option<usize> {
        let mut hosts = 0;
        for id in &self.escrows {
            let path = format!("/v1/admin/escrows/{id}");
            let escrow = self.admin("GET", &path, report, secrets).await?;
            let snapshot = &escrow["snapshot"];
            hosts += snapshot.is_object().then(|| syncing(snapshot).len())?;
        }
        Some(hosts)
    }

    /// The participants ejected now.
    pub async fn ejected(
        &self,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> std::collections::BTreeSet<String> {
        let all = self.participants(report, secrets).await;
        all.into_iter()
            .filter(|(_, h)| h.state == "ejected")
            .map(|(a, _)| a)
            .collect()
    }

    /// `{address: health}` from `GET /v1/admin/participants`.
    pub async fn participants(
        &self,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> Health {
        let list = self
            .admin("GET", "/v1/admin/participants", report, secrets)
            .await;
        let now = super::now_ms();
        list.as_ref()
            .and_then(|v| v["data"].as_array().or_else(|| v.as_array()))
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|p| {
                let health = PeerHealth {
                    state: p["state"].as_str().unwrap_or_default().to_owned(),
                    ejections: p["ejections"].as_u64().unwrap_or(0),
                    ejected_until: p["ejected_until"].as_i64().unwrap_or(0),
                    successes: p["outcomes"]["success"].as_u64().unwrap_or(0),
                    recent_strikes: strikes_seen(&p["recent_strikes"], now),
                };
                Some((p["participant_key"].as_str()?.to_owned(), health))
            })
            .collect()
    }
}
