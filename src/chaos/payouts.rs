//! Invariant 6: after settlement, the chain's payouts equal the final state's host costs. The
//! runner settles the escrow through the admin API (`POST /v1/admin/escrows/{id}/settle`), waits
//! for `settled`, then compares each host account's balance gain on the chain API
//! (`/cosmos/bank/v1beta1/balances/{address}`) with the sum of its slots' `cost` in the state a
//! simulated host holds at the gateway's final nonce (the control API): nothing lost, nothing
//! paid twice, with no help from the gateway's own numbers.
//!
//! Invariant 7 (its liveness half, numbered apart so that a settlement that never completes and
//! a payout that is wrong are told apart — and tolerated apart): the settle call is accepted and
//! the settlement completes within [`SETTLE_LIMIT`].

use std::{
    cell::RefCell,
    collections::BTreeMap,
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use super::{http::Http, report::Report};

/// How long a settlement may take after the final checks (drain, finalize, collect, commit).
const SETTLE_LIMIT: Duration = Duration::from_secs(240);
/// The invariant a settlement that is refused or never completes breaks (7; payouts are 6).
const LIVENESS: u8 = 7;

/// Where the payout check reads.
pub struct Payouts<'a> {
    pub http: &'a Http,
    pub gateway: &'a str,
    pub control: &'a str,
    pub chain: &'a str,
    pub escrow: &'a str,
    pub hosts: usize,
}

impl Payouts<'_> {
    async fn balance(&self, address: &str) -> Option<u64> {
        let url = format!("{}/cosmos/bank/v1beta1/balances/{address}", self.chain);
        let v = self.http.call("GET", &url, None).await.ok()?;
        v["balances"]
            .as_array()?
            .iter()
            .find_map(|b| b["amount"].as_str()?.parse().ok())
            .or(Some(0))
    }

    /// Every host address of the escrow with its balance now.
    pub async fn balances(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (address, _) in self.costs_at(None).await.unwrap_or_default() {
            if let Some(b) = self.balance(&address).await {
                out.insert(address, b);
            }
        }
        out
    }

    /// `{address: summed slot costs}` from the first non-forked host at `nonce` (any when None).
    async fn costs_at(&self, nonce: Option<u64>) -> Option<BTreeMap<String, u64>> {
        for i in 0..self.hosts {
            let url = format!("{}/sim/hosts/{i}/sessions/{}", self.control, self.escrow);
            let Ok(v) = self.http.call("GET", &url, None).await else {
                continue;
            };
            if !v["forked_at"].is_null() || nonce.is_some_and(|n| v["latest_nonce"] != n) {
                continue;
            }
            return Some(summed_costs(&v["host_costs"]));
        }
        None
    }

    /// Settles, then checks invariant 6 against `before` (balances before the settlement).
    pub async fn check(&self, before: &BTreeMap<String, u64>, report: &RefCell<Report>) {
        let base = format!("{}/v1/admin/escrows/{}", self.gateway, self.escrow);
        if let Err(e) = self
            .http
            .call("POST", &format!("{base}/settle"), None)
            .await
        {
            report
                .borrow_mut()
                .violation(LIVENESS, format!("the settle call failed: {e}"));
            return;
        }
        let started = Instant::now();
        let mut last = Value::Null;
        while started.elapsed() < SETTLE_LIMIT {
            if let Ok(v) = self
                .http
                .call("GET", &format!("{base}/settlement"), None)
                .await
            {
                if v["state"] == "settled" {
                    return self.compare(&v, before, report).await;
                }
                last = v;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        report.borrow_mut().violation(
            LIVENESS,
            format!(
                "the settlement did not complete within {} s (state {}, last error {})",
                SETTLE_LIMIT.as_secs(),
                last["state"],
                last["last_error"]
            ),
        );
    }

    async fn compare(
        &self,
        record: &Value,
        before: &BTreeMap<String, u64>,
        report: &RefCell<Report>,
    ) {
        let final_nonce = record["payload"]["nonce"].as_u64();
        let Some(costs) = self.costs_at(final_nonce).await else {
            report.borrow_mut().violation(
                6,
                format!("no simulated host holds the settled state (nonce {final_nonce:?})"),
            );
            return;
        };
        let mut paid = BTreeMap::new();
        for address in costs.keys() {
            let now = self.balance(address).await.unwrap_or(0);
            let was = before.get(address).copied().unwrap_or(0);
            paid.insert(address.clone(), now.saturating_sub(was));
        }
        for p in payout_mismatches(&costs, &paid) {
            report.borrow_mut().violation(6, p);
        }
        report.borrow().note(
            "payouts",
            json!({"nonce": final_nonce, "costs": costs, "paid": paid, "tx": record["tx_hash"]}),
        );
    }
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
