//! The invariants, checked from outside: the gateway's admin and public routes and the
//! simulator's control API, never the gateway's internals.
//!
//! 1. [`Checker::lockstep`]: the gateway's nonce never goes back (across `kill -9`), and after a
//!    sync every host that is not forked or under repair holds at least the gateway's nonce of
//!    before the sync, none holds one beyond the gateway's nonce read after it, and roots agree
//!    where the nonces meet ([`judge_host`]; a reused nonce or a skipped one leaves a host
//!    behind, ahead or on another root).
//! 3. [`Checker::recovery`]: once faults clear, a request succeeds within 2 s; a host that was
//!    healthy and only suffered a fault several hosts shared is not ejected or on probation.
//! 4. [`Checker::settlement`]: on a host in lockstep, no inference is still pending or started
//!    past its protocol deadline (+ the timeout buffer and a slack for votes and clock skew;
//!    judged by `checks/overdue.rs`).
//! 5. [`Secrets`] (`secrets.rs`): neither the private key nor the admin key appears in any
//!    response or log line.
//!
//! Invariant 2 is judged per request by the load (`load.rs`), invariant 6 (chain payouts equal
//! the final state's host costs) after the final checks (`payouts.rs`).

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read, Seek, SeekFrom},
    path::PathBuf,
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use super::{
    apply::Health,
    http::Http,
    lockstep::{excused, judge_host, syncing, went_back, withheld, GatewayAt, HostAt},
    report::Report,
};

pub use super::secrets::Secrets;

mod escrows;
mod overdue;
mod reads;

pub use self::escrows::escrow_ids;

/// Protocol timing of the simulated escrow (what the chaos network is configured with).
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    pub refusal_s: i64,
    pub execution_s: i64,
    /// The gateway's timeout buffer plus room for the votes, the next diff and clock skew.
    pub slack_s: i64,
}

/// State the checks carry between rounds.
pub struct Checker {
    pub http: Http,
    pub gateway: String,
    pub control: String,
    /// The escrows the checks follow now: those still serving or draining (`escrows.rs`).
    pub escrows: Vec<String>,
    pub deadlines: Deadlines,
    pub log: PathBuf,
    log_offset: u64,
    /// Each escrow's highest nonce read (a nonce must never go back, across `kill -9`).
    max_nonce: BTreeMap<String, u64>,
    /// Each escrow's nonce at its last lockstep check.
    pub last_nonce: BTreeMap<String, u64>,
    /// Inferences already reported open past their deadline (reported once, not per host).
    overdue: BTreeSet<(String, u64)>,
}

/// A read of the gateway's nonce found no snapshot (the escrow actor did not answer in time):
/// noted, and `true` when the check's patience is used up (else it is read again shortly).
async fn unavailable(report: &std::cell::RefCell<Report>, read: &str, deadline: Instant) -> bool {
    report
        .borrow()
        .note("escrow_snapshot_unavailable", json!({ "read": read }));
    if Instant::now() >= deadline {
        return true;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    false
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn now_s() -> i64 {
    now_ms().div_euclid(1_000)
}

/// One host's session as the control API reports it.
struct HostSession {
    index: usize,
    nonce: u64,
    root: String,
    forked: bool,
    open: Vec<Value>,
}

impl Checker {
    pub fn new(
        http: Http,
        gateway: String,
        control: String,
        escrow: String,
        deadlines: Deadlines,
        log: PathBuf,
    ) -> Checker {
        Checker {
            http,
            gateway,
            control,
            escrows: vec![escrow],
            deadlines,
            log,
            log_offset: 0,
            max_nonce: BTreeMap::new(),
            last_nonce: BTreeMap::new(),
            overdue: BTreeSet::new(),
        }
    }

    /// Waits (bounded) until the escrow has no attempt in flight and no race waiting for a
    /// nonce (the load is paused): then a sync must bring every host to the gateway's nonce.
    pub async fn quiesce(&self, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            let mut quiet = true;
            for escrow in &self.escrows {
                let url = format!("{}/v1/admin/escrows/{escrow}", self.gateway);
                quiet &= self.http.call("GET", &url, None).await.is_ok_and(|e| {
                    let s = &e["snapshot"];
                    s["attempts_in_flight"] == 0 && s["waiting_races"] == 0
                });
            }
            if quiet {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Invariant 1 (and 4) over every escrow followed, after reading which those are now: the
    /// fewest hosts in lockstep on any of them.
    pub async fn lockstep(
        &mut self,
        patience: Duration,
        quiet: bool,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> usize {
        self.refresh_escrows(report, secrets).await;
        let mut fewest = None;
        for escrow in self.escrows.clone() {
            let n = self
                .lockstep_of(&escrow, patience, quiet, report, secrets)
                .await;
            fewest = Some(fewest.map_or(n, |f: usize| f.min(n)));
        }
        fewest.unwrap_or(0)
    }

    /// Invariant 1 (and 4 on the hosts found in lockstep). `patience` bounds the wait for hosts
    /// that are still catching up; `quiet` says the escrow was quiesced, so that a host behind
    /// the gateway after a sync is a violation. Returns the hosts in lockstep.
    async fn lockstep_of(
        &mut self,
        escrow_id: &str,
        patience: Duration,
        quiet: bool,
        report: &std::cell::RefCell<Report>,
        secrets: &Secrets,
    ) -> usize {
        let deadline = Instant::now() + patience;
        loop {
            let escrow_path = format!("/v1/admin/escrows/{escrow_id}");
            let Some(escrow) = self.admin("GET", &escrow_path, report, secrets).await else {
                return 0;
            };
            let snap = &escrow["snapshot"];
            let Some(GatewayAt { nonce: before, .. }) = GatewayAt::of(snap) else {
                if unavailable(report, "before the sync", deadline).await {
                    return 0;
                }
                continue;
            };
            self.last_nonce.insert(escrow_id.to_owned(), before);
            let highest = self.max_nonce.entry(escrow_id.to_owned()).or_insert(0);
            if let Some(p) = went_back(*highest, before) {
                report
                    .borrow_mut()
                    .violation(1, format!("escrow {escrow_id}: {p}"));
            }
            *highest = (*highest).max(before);
            let mut excluded = excused(snap);
            let mut lagging = withheld(snap);
            lagging.extend(syncing(snap));
            let Some(synced) = self
                .admin("POST", &format!("{escrow_path}/sync"), report, secrets)
                .await
            else {
                return 0;
            };
            let Some(synced_at) = GatewayAt::of(&synced) else {
                if unavailable(report, "the sync's answer", deadline).await {
                    return 0;
                }
                continue;
            };
            let addresses = self.addresses().await;
            // An ejected host gets no traffic and may lag until it is back; it must not diverge.
            let ejected = self.ejected(report, secrets).await;
            let sessions = self.sessions(escrow_id).await;
            // Read again after the hosts: a diff composed meanwhile (a confirmed timeout is sent
            // at once) is then known, so a host holding it is not "beyond" the gateway.
            let Some(after) = self.admin("GET", &escrow_path, report, secrets).await else {
                return 0;
            };
            excluded.extend(excused(&after["snapshot"]));
            lagging.extend(withheld(&after["snapshot"]));
            lagging.extend(syncing(&after["snapshot"]));
            let Some(latest) = GatewayAt::of(&after["snapshot"]) else {
                if unavailable(report, "after the hosts", deadline).await {
                    return 0;
                }
                continue;
            };
            self.last_nonce.insert(escrow_id.to_owned(), latest.nonce);
            let mut problems = Vec::new();
            let mut in_step = Vec::new();
            for s in sessions {
                let address = addresses.get(&s.index).cloned().unwrap_or_default();
                if s.forked || excluded.contains(&address) {
                    continue;
                }
                let lagging_ok = !quiet || ejected.contains(&address) || lagging.contains(&address);
                let view = HostAt {
                    index: s.index,
                    nonce: s.nonce,
                    root: &s.root,
                };
                match judge_host(&view, before, &synced_at, &latest, lagging_ok) {
                    Some(p) => problems.push(p),
                    None if s.nonce == latest.nonce || s.nonce == synced_at.nonce => {
                        in_step.push(s);
                    }
                    None => {}
                }
            }
            if problems.is_empty() || Instant::now() >= deadline {
                for p in problems {
                    report
                        .borrow_mut()
                        .violation(1, format!("escrow {escrow_id}: {p}"));
                }
                for s in &in_step {
                    self.settlement(escrow_id, s, report);
                }
                return in_step.len();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Invariant 4 on one host in lockstep: no open inference past its deadline (each reported
    /// once).
    fn settlement(&mut self, escrow: &str, s: &HostSession, report: &std::cell::RefCell<Report>) {
        for o in overdue::overdue(&s.open, now_s(), self.deadlines) {
            if self.overdue.insert((escrow.to_owned(), o.id)) {
                report.borrow_mut().violation(
                    4,
                    format!(
                        "escrow {escrow}: inference {} is still {} {} s after its {} deadline (host {})",
                        o.id, o.status, o.late_s, o.deadline, s.index
                    ),
                );
            }
        }
    }

    /// Invariant 3, first half: a request succeeds within 2 s of the faults clearing.
    pub async fn recovery(&self, report: &std::cell::RefCell<Report>, secrets: &Secrets) {
        let started = Instant::now();
        let body =
            json!({"messages": [{"role": "user", "content": "recovery probe"}], "max_tokens": 4});
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(2) {
            let sent = self
                .http
                .client()
                .post(format!("{}/v1/chat/completions", self.gateway))
                .timeout(
                    Duration::from_secs(2)
                        .saturating_sub(started.elapsed())
                        .max(Duration::from_millis(50)),
                )
                .send_json(&body)
                .await;
            match sent {
                Ok(mut r) => {
                    let status = r.status().as_u16();
                    let bytes = r.body().await.unwrap_or_default();
                    secrets.scan(&bytes, "a probe response", report);
                    if status == 200 {
                        return;
                    }
                    last = format!(
                        "{status} {}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                    );
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        report.borrow_mut().violation(
            3,
            format!("no request succeeded within 2 s of the faults clearing (last: {last})"),
        );
    }

    /// Invariant 3, second half: hosts healthy before a shared fault are not ejected by it.
    pub fn shared_fault_spared(
        before: &Health,
        after: &Health,
        hosts: &[String],
        report: &std::cell::RefCell<Report>,
    ) {
        for h in hosts {
            let (Some(was), Some(now)) = (before.get(h), after.get(h)) else {
                continue;
            };
            let (ej0, ej1, state) = (was.ejections, now.ejections, &now.state);
            if was.state == "healthy" && (ej1 > ej0 || state == "ejected" || state == "probation") {
                let struck = now.recent_strikes.join(", ");
                report.borrow_mut().violation(3, format!(
                    "host {h} was ejected for a fault several hosts shared (now {state}, ejections {ej0} → {ej1}; its last strikes, newest first: {struck})"
                ));
            }
        }
    }

    /// Invariant 5 over the gateway's log lines written since the last scan.
    pub fn scan_log(&mut self, secrets: &Secrets, report: &std::cell::RefCell<Report>) -> u64 {
        let Ok(mut f) = std::fs::File::open(&self.log) else {
            return 0;
        };
        let mut text = Vec::new();
        if f.seek(SeekFrom::Start(self.log_offset)).is_ok() && f.read_to_end(&mut text).is_ok() {
            // Keep a partial last line for the next scan.
            let complete = text.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
            secrets.scan(&text[..complete], "a gateway log line", report);
            self.log_offset += complete as u64;
        }
        self.log_offset
    }
}
