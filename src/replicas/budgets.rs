//! `BudgetPublisher`: publishes the live budget of every escrow this replica runs to the shared
//! store, for the rotation's leader on another replica (`crate::rotation::remote`).
//!
//! - **Owns**: what it published last per escrow (nonce, spendable, lease epoch, when) and
//!   whether the last publication failed.
//! - **Survives a restart**: nothing; the table `escrow_budgets` holds the publications (each
//!   with its owner, lease epoch and the database's time), and the first tick after a start
//!   publishes every escrow again.
//! - **Timers**: one, every [`EVERY`] (the settlement tick's cadence): each escrow on the board
//!   whose lease this replica holds is published when its budget or epoch changed since the
//!   last publication, or when that is older than `refresh` (one lease TTL, so an idle escrow's
//!   publication stays fresh). One statement per tick, fenced by the lease rows
//!   (`crate::store::postgres::budgets`); none while the previous one runs.
//!
//! Metric `devshard_escrow_budgets_published_total{result}` (`published`: rows, `failed`:
//! statements); log stages `escrow_budget_published` (first publication of an escrow under
//! an epoch), `escrow_budget_publish_failed`, `escrow_budget_publish_recovered`.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use actix::prelude::*;
use devshard_actors::directory::EscrowBoard;
use prometheus::{IntCounterVec, Opts, Registry};
use slog::{info, warn, Logger};

use super::Replicas;
use crate::store::postgres::budgets::BudgetReport;

/// How often the board is looked at.
pub const EVERY: Duration = Duration::from_millis(250);

/// The last publication of one escrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub report: BudgetReport,
    pub epoch: u64,
    pub at: Instant,
}

/// Whether an escrow's budget is published now (pure): never published, changed, under
/// another epoch, or published longer than `refresh` ago.
pub fn publish_due(
    last: Option<&Sent>,
    report: BudgetReport,
    epoch: u64,
    now: Instant,
    refresh: Duration,
) -> bool {
    match last {
        None => true,
        Some(s) => s.report != report || s.epoch != epoch || now.duration_since(s.at) >= refresh,
    }
}

pub struct BudgetPublisher {
    replicas: Replicas,
    board: EscrowBoard,
    refresh: Duration,
    last: BTreeMap<String, Sent>,
    busy: bool,
    failing: bool,
    metric: Option<IntCounterVec>,
    log: Logger,
}

impl BudgetPublisher {
    /// Starts the publisher on the current arbiter (PostgreSQL only: `replicas` exists).
    pub fn start(replicas: Replicas, board: EscrowBoard, registry: &Registry, log: Logger) {
        let metric = IntCounterVec::new(
            Opts::new(
                "escrow_budgets_published_total",
                "Escrow budgets published to the shared store for the rotation's leader, by result",
            ),
            &["result"],
        )
        .and_then(|m| registry.register(Box::new(m.clone())).map(|()| m))
        .ok();
        if let Some(m) = &metric {
            m.with_label_values(&["published"]);
            m.with_label_values(&["failed"]);
        }
        let refresh = replicas
            .pg()
            .map_or(Duration::from_secs(10), |pg| pg.replica().lease_ttl);
        BudgetPublisher {
            replicas,
            board,
            refresh,
            last: BTreeMap::new(),
            busy: false,
            failing: false,
            metric,
            log,
        }
        .start();
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        let Some(pg) = self.replicas.pg() else { return };
        let held: BTreeMap<String, u64> = pg.held_leases().into_iter().collect();
        self.last.retain(|id, _| held.contains_key(id));
        let now = Instant::now();
        let board = self.board.load();
        let due: Vec<(String, BudgetReport, u64)> = board
            .escrows
            .iter()
            .filter_map(|e| {
                let epoch = *held.get(&e.id)?;
                // Unsettled inferences may each still take a nonce (`nonce_room`): published
                // as used, as the leader counts its own escrows' (`rotation/facts.rs`).
                let report = e.budget.check(|b| BudgetReport {
                    nonce: b.nonce.saturating_add(b.settling),
                    spendable: b.spendable(),
                });
                publish_due(self.last.get(&e.id), report, epoch, now, self.refresh)
                    .then(|| (e.id.clone(), report, epoch))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        self.busy = true;
        let replicas = self.replicas.clone();
        let rows: Vec<(String, BudgetReport)> =
            due.iter().map(|(id, r, _)| (id.clone(), *r)).collect();
        let fut = async move {
            match replicas.pg() {
                Some(pg) => pg.publish_budgets(&rows).await,
                None => Ok(0),
            }
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, _| {
            act.busy = false;
            act.published(due, res, now);
        }));
    }

    fn published(
        &mut self,
        due: Vec<(String, BudgetReport, u64)>,
        res: Result<u64, devshard_actors::store::StoreError>,
        at: Instant,
    ) {
        match res {
            Ok(rows) => {
                if let Some(m) = &self.metric {
                    m.with_label_values(&["published"]).inc_by(rows);
                }
                if std::mem::take(&mut self.failing) {
                    info!(self.log, "escrow budgets published again";
                        "stage" => "escrow_budget_publish_recovered");
                }
                let sent = due.len();
                for (id, report, epoch) in due {
                    let first = self.last.get(&id).is_none_or(|s| s.epoch != epoch);
                    if first {
                        // `landed` < `sent`: a lease was lost meanwhile (fenced in the statement).
                        info!(self.log, "escrow budget published for the rotation's leader";
                            "stage" => "escrow_budget_published", "escrow" => &id,
                            "epoch" => epoch, "nonce" => report.nonce,
                            "spendable" => report.spendable, "sent" => sent, "landed" => rows);
                    }
                    self.last.insert(id, Sent { report, epoch, at });
                }
            }
            Err(e) => {
                if let Some(m) = &self.metric {
                    m.with_label_values(&["failed"]).inc();
                }
                if !std::mem::replace(&mut self.failing, true) {
                    warn!(self.log, "escrow budgets not published; retrying every tick";
                        "stage" => "escrow_budget_publish_failed", "error" => %e);
                }
            }
        }
    }
}

impl Actor for BudgetPublisher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(EVERY, |act, ctx| act.tick(ctx));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_published_when_it_changes_moves_epoch_or_ages() {
        let t0 = Instant::now();
        let r = BudgetReport {
            nonce: 5,
            spendable: 100,
        };
        let refresh = Duration::from_secs(2);
        assert!(publish_due(None, r, 1, t0, refresh));
        let sent = Sent {
            report: r,
            epoch: 1,
            at: t0,
        };
        assert!(!publish_due(
            Some(&sent),
            r,
            1,
            t0 + Duration::from_millis(250),
            refresh
        ));
        let moved = BudgetReport { nonce: 6, ..r };
        assert!(publish_due(Some(&sent), moved, 1, t0, refresh));
        assert!(publish_due(Some(&sent), r, 2, t0, refresh), "new epoch");
        assert!(
            publish_due(Some(&sent), r, 1, t0 + refresh, refresh),
            "refresh"
        );
    }
}
