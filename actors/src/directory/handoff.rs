//! The directory's ownership loop, when several replicas share the store
//! ([`crate::store::Store::replica`] is `Some`; otherwise the directory owns every escrow and
//! none of this runs).
//!
//! - **Owns**: [`Ownership`] (who this replica is, whether a round runs, the timer's handle);
//!   the escrows being handed over are marked on their slots (`handing_over`).
//! - **Survives**: nothing; after a restart the first round runs at once and the lease table
//!   says what this replica held (it resumes its own live leases with a new epoch).
//! - **Timers**: `ownership round`, every TTL/3 and sooner when a lease it could take expires;
//!   `handoff <escrow>` while an escrow drains before its release.
//!
//! A round reads the registrations (`ns::ESCROWS`: escrows another replica registered appear,
//! removed ones go) and the replica view off the actor's thread, plans with
//! [`plan_ownership`], then claims (spawns the escrow, whose start claims the lease), stops the
//! escrows whose lease another replica took, and hands surplus escrows over gracefully: no new
//! picks, the requests in flight finish (at most one TTL), the actor stops, every write is
//! flushed, then the lease is released so another replica claims it at once.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{debug, info, warn};

use super::{
    ownership::{plan_ownership, OwnershipAction, OwnershipInput, OwnershipPlan},
    Directory, DirectoryError, EscrowSlot,
};
use crate::{
    escrow::{messages::Retire, EscrowInfo},
    store::{ns, ReplicaIdentity, ReplicaView, StoreError},
};

/// Extra wait after a lease's expiry before the round that takes it (database clock skew).
const EXPIRY_MARGIN: Duration = Duration::from_millis(50);
/// How often a draining escrow is checked for requests still in flight.
const DRAIN_POLL: Duration = Duration::from_millis(25);
/// How long a retired escrow actor may take to stop before its writes are flushed anyway.
const STOP_WAIT: Duration = Duration::from_secs(2);
const ROUND_TIMER: &str = "ownership round";

/// The loop's state (see the module docs).
pub(crate) struct Ownership {
    me: ReplicaIdentity,
    round_running: bool,
    next_round: Option<SpawnHandle>,
}

impl Ownership {
    pub(crate) fn new(me: ReplicaIdentity) -> Ownership {
        Ownership {
            me,
            round_running: false,
            next_round: None,
        }
    }

    fn period(&self) -> Duration {
        (self.me.lease_ttl / 3).max(Duration::from_millis(10))
    }
}

/// Runs an ownership round now (start-up, then its own timer).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub(crate) struct OwnershipRound;

type RoundRead = (Vec<(String, serde_json::Value)>, ReplicaView);

impl Handler<OwnershipRound> for Directory {
    type Result = ();

    fn handle(&mut self, _: OwnershipRound, ctx: &mut Self::Context) {
        let Some(own) = self.ownership.as_mut() else {
            return;
        };
        if own.round_running {
            return;
        }
        own.round_running = true;
        let store = self.deps.store.clone();
        let known: BTreeSet<String> = self.escrows.keys().cloned().collect();
        let read = tokio::task::spawn_blocking(move || -> Result<RoundRead, StoreError> {
            Ok((store.list(ns::ESCROWS)?, store.replica_view()?))
        });
        ctx.spawn(read.into_actor(self).map(move |res, act, ctx| {
            let next = match res {
                Ok(Ok((records, view))) => {
                    let heartbeat = view.next_heartbeat_expiry_ms;
                    let plan = act.ownership_round(records, &known, view, ctx);
                    // Sooner of: a lease this replica could take expires, or another replica's
                    // heartbeat does (then the shares change if it died).
                    plan.next_expiry_ms.into_iter().chain(heartbeat).min()
                }
                Ok(Err(e)) => {
                    warn!(act.deps.log, "ownership round failed"; "stage" => "ownership_failed",
                        "error" => %e);
                    None
                }
                Err(e) => {
                    warn!(act.deps.log, "ownership round failed"; "stage" => "ownership_failed",
                        "error" => %e);
                    None
                }
            };
            act.schedule_round(next, ctx);
        }));
    }
}

impl Directory {
    /// One round on what was read (see the module docs); `known`: the escrows registered here
    /// when the read was issued (only those may be forgotten for a missing record).
    fn ownership_round(
        &mut self,
        records: Vec<(String, serde_json::Value)>,
        known: &BTreeSet<String>,
        view: ReplicaView,
        ctx: &mut Context<Self>,
    ) -> OwnershipPlan {
        self.sync_registrations(records, known);
        let me = match &self.ownership {
            Some(o) => o.me.id.clone(),
            None => String::new(),
        };
        let registered: BTreeSet<String> = self.escrows.keys().cloned().collect();
        let running: BTreeSet<String> = (self.escrows.iter())
            .filter(|(_, e)| !e.handing_over && e.slot.addr.as_ref().is_some_and(|a| a.connected()))
            .map(|(id, _)| id.clone())
            .collect();
        let unclaimable: BTreeSet<String> = (self.escrows.iter())
            .filter(|(_, e)| e.handing_over || e.slot.failed)
            .map(|(id, _)| id.clone())
            .collect();
        let plan = plan_ownership(OwnershipInput {
            me: &me,
            live: &view.live_replicas,
            registered: &registered,
            running: &running,
            unclaimable: &unclaimable,
            leases: &view.leases,
        });
        let log = &self.deps.log;
        let kv = slog::o!("stage" => "ownership_planned", "share" => plan.share,
            "owned" => plan.owned, "replicas" => plan.replicas, "actions" => plan.actions.len());
        match plan.actions.is_empty() {
            true => debug!(log.new(kv), "ownership planned"),
            false => info!(log.new(kv), "ownership planned"),
        }
        for action in &plan.actions {
            self.apply_ownership(action, ctx);
        }
        self.publish_board();
        self.count_owned();
        self.deps.store.ownership_round_done();
        plan
    }

    /// Adds the escrows registered elsewhere and forgets the ones removed elsewhere.
    fn sync_registrations(
        &mut self,
        records: Vec<(String, serde_json::Value)>,
        known: &BTreeSet<String>,
    ) {
        let listed: BTreeSet<String> = records.iter().map(|(id, _)| id.clone()).collect();
        for (id, value) in records {
            if self.escrows.contains_key(&id) {
                continue;
            }
            match serde_json::from_value::<EscrowInfo>(value) {
                Ok(info) => {
                    let closed = crate::settlement::load_record(&self.deps.store, &id).is_some();
                    self.escrows
                        .insert(id.clone(), EscrowSlot::new(Arc::new(info), closed));
                    info!(self.deps.log, "escrow registered by another replica";
                        "stage" => "escrow_registration_seen", "escrow" => &id);
                }
                Err(e) => warn!(self.deps.log, "escrow registration unreadable";
                    "escrow" => &id, "error" => %e),
            }
        }
        let gone: Vec<String> = known
            .iter()
            .filter(|id| !listed.contains(*id) && self.escrows.contains_key(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(addr) = self.escrows.remove(&id).and_then(|e| e.slot.addr) {
                addr.do_send(Retire);
            }
            info!(self.deps.log, "escrow removed by another replica";
                "stage" => "escrow_registration_gone", "escrow" => &id);
        }
    }

    fn apply_ownership(&mut self, action: &OwnershipAction, ctx: &mut Context<Self>) {
        let handoffs = self.deps.metrics.escrow_handoffs.clone();
        match action {
            OwnershipAction::Claim { escrow, kind } => match self.spawn_escrow(escrow, ctx) {
                Ok(()) => {
                    handoffs.with_label_values(&[kind.label()]).inc();
                    info!(self.deps.log, "escrow claimed"; "stage" => "escrow_claimed",
                        "escrow" => escrow.as_str(), "kind" => kind.label());
                }
                Err(DirectoryError::Store(StoreError::LeaseHeld { owner, .. })) => {
                    debug!(self.deps.log, "escrow claimed by another replica first";
                        "stage" => "escrow_claim_refused", "escrow" => escrow.as_str(),
                        "owner" => owner);
                }
                Err(e) => {
                    warn!(self.deps.log, "escrow not claimed"; "stage" => "escrow_claim_failed",
                    "escrow" => escrow.as_str(), "error" => %e)
                }
            },
            OwnershipAction::Lost { escrow, owner } => {
                let Some(e) = self.escrows.get_mut(escrow) else {
                    return;
                };
                if let Some(addr) = e.slot.addr.take() {
                    addr.do_send(Retire);
                }
                handoffs.with_label_values(&["lost"]).inc();
                warn!(self.deps.log, "escrow lease taken by another replica; escrow stopped";
                    "stage" => "lease_lost", "escrow" => escrow.as_str(), "owner" => owner.as_str(),
                    "detected_by" => "ownership");
            }
            OwnershipAction::Release { escrow } => self.hand_over(escrow, ctx),
        }
    }

    /// Hands an escrow over: no new picks, drain (bounded by the TTL), stop, flush, release.
    fn hand_over(&mut self, escrow: &str, ctx: &mut Context<Self>) {
        let Some(ttl) = self.ownership.as_ref().map(|o| o.me.lease_ttl) else {
            return;
        };
        let Some(e) = self.escrows.get_mut(escrow) else {
            return;
        };
        e.handing_over = true;
        let (in_flight, budget) = (e.in_flight.clone(), e.budget.clone());
        let addr = e.slot.addr.clone();
        self.publish_board();
        let timer = format!("handoff {escrow}");
        let due = self.deps.clock.now_ms().saturating_add(ttl_ms(ttl));
        let generation = self.stats.arm_timer(timer.clone(), due);
        let started = tokio::time::Instant::now();
        let (escrow, store) = (escrow.to_string(), self.deps.store.clone());
        let release = async move {
            let deadline = started + ttl;
            let idle = || {
                in_flight.load(std::sync::atomic::Ordering::Relaxed) == 0
                    && budget.check(|v| v.reservations.is_empty())
            };
            while !idle() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(DRAIN_POLL).await;
            }
            let drained = idle();
            if let Some(addr) = &addr {
                addr.do_send(Retire);
                let stop_by = tokio::time::Instant::now() + STOP_WAIT;
                while addr.connected() && tokio::time::Instant::now() < stop_by {
                    tokio::time::sleep(DRAIN_POLL).await;
                }
            }
            // Every write of the stopped actor is durable before the lease goes.
            let flushed = store.flush().await;
            let id = escrow.clone();
            let released = tokio::task::spawn_blocking(move || store.release_escrow(&id)).await;
            (escrow, drained, flushed, released)
        };
        ctx.spawn(release.into_actor(self).map(
            move |(escrow, drained, flushed, released), act, _| {
                act.stats.disarm_timer(&timer, generation);
                if let Some(e) = act.escrows.get_mut(&escrow) {
                    e.handing_over = false;
                    e.slot.addr = None;
                }
                let waited_ms = started.elapsed().as_millis();
                let released = released
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()));
                match (flushed, released) {
                    (Ok(()), Ok(())) => {
                        act.deps
                            .metrics
                            .escrow_handoffs
                            .with_label_values(&["released"])
                            .inc();
                        info!(act.deps.log, "escrow handed over"; "stage" => "escrow_released",
                            "escrow" => &escrow, "drained" => drained, "waited_ms" => waited_ms);
                    }
                    (flushed, released) => warn!(act.deps.log,
                        "escrow stopped but its lease not released (it expires by itself)";
                        "stage" => "escrow_release_failed", "escrow" => &escrow,
                        "flush" => ?flushed, "release" => ?released),
                }
                act.publish_board();
                act.count_owned();
            },
        ));
    }

    fn count_owned(&self) {
        let owned = (self.escrows.values())
            .filter(|e| !e.handing_over && e.slot.addr.as_ref().is_some_and(|a| a.connected()))
            .count();
        (self.deps.metrics.escrows_owned).set(i64::try_from(owned).unwrap_or(i64::MAX));
    }

    /// Arms the next round: one period away, or sooner at `next_expiry_ms` (plus a margin).
    fn schedule_round(&mut self, next_expiry_ms: Option<i64>, ctx: &mut Context<Self>) {
        let Some(own) = self.ownership.as_mut() else {
            return;
        };
        own.round_running = false;
        let soon = next_expiry_ms
            .map(|ms| Duration::from_millis(u64::try_from(ms.max(0)).unwrap_or(0)) + EXPIRY_MARGIN);
        let delay = soon.map_or(own.period(), |s| s.min(own.period()));
        if let Some(h) = own.next_round.take() {
            ctx.cancel_future(h);
        }
        let due = self.deps.clock.now_ms().saturating_add(ttl_ms(delay));
        let generation = self.stats.arm_timer(ROUND_TIMER, due);
        let handle = ctx.run_later(delay, move |act, ctx| {
            act.stats.disarm_timer(ROUND_TIMER, generation);
            ctx.notify(OwnershipRound);
        });
        if let Some(own) = self.ownership.as_mut() {
            own.next_round = Some(handle);
        }
    }

    /// A respawn refused because another replica holds the lease: the escrow is simply not owned
    /// here, and the restart just charged for it is taken back. `true` if so.
    pub(crate) fn not_owned(&mut self, escrow: &str, error: &DirectoryError) -> bool {
        let DirectoryError::Store(StoreError::LeaseHeld { owner, .. }) = error else {
            return false;
        };
        if let Some(e) = self.escrows.get_mut(escrow) {
            e.slot.restarts.pop_back();
            e.slot.addr = None;
        }
        info!(self.deps.log, "escrow owned by another replica; not respawned here";
            "stage" => "escrow_not_owned", "escrow" => escrow, "owner" => owner.as_str());
        self.publish_board();
        self.count_owned();
        true
    }
}

fn ttl_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
