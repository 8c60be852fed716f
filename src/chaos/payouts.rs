//! Invariant 6: after settlement, the chain's payouts equal the final state's host costs, per
//! escrow and over the run:
//! - each escrow the chain reports settled (`GET /sim/escrows`: the tx, its final nonce and what
//!   each validator address was `paid`) is compared, once, with the sum of each host's slot
//!   `cost` in the state a simulated host holds at that nonce (the control API). With rotation
//!   (`--max-nonce`) escrows settle during the run: each is checked at the next clear;
//! - at the end the runner turns rotation off, settles every escrow still open through the admin
//!   API (`POST /v1/admin/escrows/{id}/settle`) and waits for all; then each host account's
//!   balance gain over the run on the chain API (`/cosmos/bank/v1beta1/balances/{address}`) must
//!   equal the costs summed over every settled escrow: nothing lost, nothing paid twice, with no
//!   help from the gateway's own numbers.
//!
//! Invariant 7 (its liveness half, numbered apart so that a settlement that never completes and
//! a payout that is wrong are told apart — and tolerated apart): the settle calls are accepted
//! and the settlements complete within [`SETTLE_LIMIT`].

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use super::{http::Http, report::Report};

/// How long the settlements may take after the final checks (drain, finalize, collect, commit).
const SETTLE_LIMIT: Duration = Duration::from_secs(240);
/// The invariant a settlement that is refused or never completes breaks (7; payouts are 6).
const LIVENESS: u8 = 7;

/// Where the payout check reads, and what it has checked so far.
pub struct Payouts {
    pub http: Http,
    pub gateway: String,
    pub control: String,
    pub chain: String,
    pub hosts: usize,
    /// Each host address's balance when the run started.
    start: BTreeMap<String, u64>,
    /// Escrows whose settlement was checked.
    checked: BTreeSet<String>,
    /// Σ cost per address over the escrows checked.
    earned: BTreeMap<String, u64>,
}

impl Payouts {
    /// Reads every simulated host's address (`GET /sim/hosts`) and its balance now.
    pub async fn new(http: Http, urls: [String; 3], hosts: usize) -> Payouts {
        let [gateway, control, chain] = urls;
        let mut p = Payouts {
            http,
            gateway,
            control,
            chain,
            hosts,
            start: BTreeMap::new(),
            checked: BTreeSet::new(),
            earned: BTreeMap::new(),
        };
        let list = p
            .http
            .call("GET", &format!("{}/sim/hosts", p.control), None)
            .await;
        let list = list
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        for address in list.iter().filter_map(|h| h["address"].as_str()) {
            if let Some(b) = p.balance(address).await {
                p.start.insert(address.to_owned(), b);
            }
        }
        p
    }

    async fn balance(&self, address: &str) -> Option<u64> {
        let url = format!("{}/cosmos/bank/v1beta1/balances/{address}", self.chain);
        let v = self.http.call("GET", &url, None).await.ok()?;
        v["balances"]
            .as_array()?
            .iter()
            .find_map(|b| b["amount"].as_str()?.parse().ok())
            .or(Some(0))
    }

    /// `{address: summed slot costs}` of `escrow` from the first non-forked host at `nonce`.
    async fn costs_at(&self, escrow: &str, nonce: Option<u64>) -> Option<BTreeMap<String, u64>> {
        // A live session first, then what a host held before it restarted empty since.
        for held in ["sessions", "forgotten"] {
            for i in 0..self.hosts {
                let url = format!("{}/sim/hosts/{i}/{held}/{escrow}", self.control);
                let Ok(v) = self.http.call("GET", &url, None).await else {
                    continue;
                };
                if !v["forked_at"].is_null() || nonce.is_some_and(|n| v["latest_nonce"] != n) {
                    continue;
                }
                return Some(summed_costs(&v["host_costs"]));
            }
        }
        None
    }

    /// Checks every escrow the chain reports settled that was not checked yet.
    pub async fn check_settled(&mut self, report: &RefCell<Report>) {
        let url = format!("{}/sim/escrows", self.control);
        let Ok(books) = self.http.call("GET", &url, None).await else {
            return;
        };
        for book in books.as_array().into_iter().flatten() {
            let Some(id) = book["id"].as_str() else {
                continue;
            };
            let status = &book["status"];
            if status["status"] != "settled" || self.checked.contains(id) {
                continue;
            }
            self.checked.insert(id.to_owned());
            let final_nonce = status["nonce"].as_u64();
            let Some(costs) = self.costs_at(id, final_nonce).await else {
                report.borrow_mut().violation(
                    6,
                    format!(
                    "escrow {id}: no simulated host holds the settled state (nonce {final_nonce:?})"
                ),
                );
                continue;
            };
            let paid = summed_paid(&status["paid"]);
            for p in payout_mismatches(&costs, &paid) {
                report
                    .borrow_mut()
                    .violation(6, format!("escrow {id}: {p}"));
            }
            for (address, cost) in &costs {
                *self.earned.entry(address.clone()).or_insert(0) += cost;
            }
            report.borrow().note(
                "payouts",
                json!({"escrow": id, "nonce": final_nonce, "costs": costs, "paid": paid,
                    "tx": status["tx_hash"]}),
            );
        }
    }

    /// At the end: rotation off, every open escrow settled, then invariant 6 per escrow and over
    /// the run.
    pub async fn settle_all(&mut self, report: &RefCell<Report>) {
        let settings = format!("{}/v1/admin/settings", self.gateway);
        let off = json!({"rotation": {"enabled": false}});
        if let Err(e) = self.http.call("PUT", &settings, Some(&off)).await {
            report
                .borrow()
                .note("rotation_off_failed", json!(e.to_string()));
        }
        let list = format!("{}/v1/admin/escrows", self.gateway);
        let ids = match self.http.call("GET", &list, None).await {
            Ok(v) => super::checks::escrow_ids(&v),
            Err(e) => {
                let failed = format!("the escrow list could not be read: {e}");
                return report.borrow_mut().violation(LIVENESS, failed);
            }
        };
        let mut open = Vec::new();
        for id in ids {
            let base = format!("{}/v1/admin/escrows/{id}", self.gateway);
            let url = format!("{base}/settlement");
            let state = self.http.call("GET", &url, None).await;
            if state.as_ref().is_ok_and(|v| v["state"] == "settled") {
                continue;
            }
            // Gone since the list was read: the rotation's retention (a check already running
            // when rotation was turned off) removes only settled escrows, and nothing else here
            // deletes one.
            if state.is_err() && matches!(self.http.get(&url).await, Ok((404, _))) {
                continue;
            }
            if state.is_ok_and(|v| v["state"] == "active") {
                if let Err(e) = self
                    .http
                    .call("POST", &format!("{base}/settle"), None)
                    .await
                {
                    let failed = format!("escrow {id}: the settle call failed: {e}");
                    report.borrow_mut().violation(LIVENESS, failed);
                    continue;
                }
            }
            open.push(base);
        }
        let started = Instant::now();
        let mut last = BTreeMap::new();
        while !open.is_empty() && started.elapsed() < SETTLE_LIMIT {
            let mut still = Vec::new();
            for base in open {
                match self
                    .http
                    .call("GET", &format!("{base}/settlement"), None)
                    .await
                {
                    Ok(v) if v["state"] == "settled" => {}
                    Ok(v) => {
                        last.insert(base.clone(), v);
                        still.push(base);
                    }
                    Err(_) => still.push(base),
                }
            }
            open = still;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for base in &open {
            let v = last.get(base).cloned().unwrap_or(Value::Null);
            report.borrow_mut().violation(
                LIVENESS,
                format!(
                    "{base}: the settlement did not complete within {} s (state {}, last error {})",
                    SETTLE_LIMIT.as_secs(),
                    v["state"],
                    v["last_error"]
                ),
            );
        }
        self.check_settled(report).await;
        let mut gained = BTreeMap::new();
        for (address, was) in &self.start {
            let now = self.balance(address).await.unwrap_or(0);
            gained.insert(address.clone(), now.saturating_sub(*was));
        }
        for p in payout_mismatches(&self.earned, &gained) {
            report
                .borrow_mut()
                .violation(6, format!("over the run: {p}"));
        }
        report.borrow().note(
            "payouts_over_the_run",
            json!({"escrows_settled": self.checked.len(), "costs": self.earned, "gained": gained}),
        );
    }
}

/// `{address: amount}` of a settled escrow's `paid`.
fn summed_paid(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(a, n)| (a.clone(), n.as_u64().unwrap_or(0)))
        .collect()
}

/// `{address: Σ cost}` over a control view's `host_costs` (multi-slot hosts summed).
fn summed_costs(v: &Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for h in v.as_array().into_iter().flatten() {
        if let Some(a) = h["address"].as_str() {
            *out.entry(a.to_owned()).or_insert(0) += h["cost"].as_u64().unwrap_or(0);
        }
    }
    out
}

/// Every host paid other than its cost.
pub fn payout_mismatches(
    costs: &BTreeMap<String, u64>,
    paid: &BTreeMap<String, u64>,
) -> Vec<String> {
    costs
        .iter()
        .filter_map(|(address, cost)| {
            let got = paid.get(address).copied().unwrap_or(0);
            (got != *cost).then(|| {
                format!("host {address} was paid {got} on chain; the final state says its cost is {cost}")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::EscrowStatus;
    use devshard_actors::protocol::crypto::SigningKey;

    /// The checker reads what the simulated chain writes: a settled escrow's `paid`, through
    /// `GET /sim/escrows`'s JSON.
    #[test]
    fn a_settled_escrow_s_paid_is_read_from_the_chain_s_json() {
        let a = SigningKey::derive("payouts", 0).address().clone();
        let b = SigningKey::derive("payouts", 1).address().clone();
        let status = EscrowStatus::Settled {
            tx_hash: "AB".into(),
            height: 9,
            nonce: 2_985,
            fees: 3,
            refund: 4,
            paid: BTreeMap::from([(a.clone(), 31_891), (b.clone(), 586)]),
        };
        let book = json!({"id": "42", "max_nonce": 3_000, "status": status});
        assert_eq!(book["status"]["status"], "settled");
        assert_eq!(book["status"]["nonce"], 2_985);
        let paid = summed_paid(&book["status"]["paid"]);
        assert_eq!(paid.get(a.as_str()), Some(&31_891));
        assert_eq!(paid.get(b.as_str()), Some(&586));
        assert!(summed_paid(&json!({"status": "open"})["paid"]).is_empty());
    }

    #[test]
    fn multi_slot_costs_are_summed_and_any_difference_is_reported() {
        let v = json!([
            {"slot_id": 0, "address": "a", "cost": 5},
            {"slot_id": 1, "address": "b", "cost": 7},
            {"slot_id": 2, "address": "a", "cost": 1}
        ]);
        let costs = summed_costs(&v);
        assert_eq!(costs, BTreeMap::from([("a".into(), 6), ("b".into(), 7)]));
        let exact = BTreeMap::from([("a".to_owned(), 6), ("b".to_owned(), 7)]);
        assert!(payout_mismatches(&costs, &exact).is_empty());
        let twice = BTreeMap::from([("a".to_owned(), 12), ("b".to_owned(), 7)]);
        assert_eq!(payout_mismatches(&costs, &twice).len(), 1);
        let lost = BTreeMap::from([("a".to_owned(), 6)]);
        assert!(payout_mismatches(&costs, &lost)[0].contains("host b was paid 0"));
    }
}
