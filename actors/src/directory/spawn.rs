//! Spawning, respawning and retiring entity actors, with the restart budget. A stop or a failed
//! respawn caused by a database outage is not charged to the budget: the escrow is respawned
//! with back-off until the database is back (`respawn_escrow`).

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{error, info, warn};

use super::{
    ActorKind, AddEscrow, Died, Directory, DirectoryError, EscrowSlot, RemoveEscrow, Slot,
    StopCause,
};
use crate::{
    escrow::{
        key::{self, NS_ESCROW_KEYS},
        messages::Retire,
        payloads,
        session::checkpoint::{restore_durable, RestoreError},
        BudgetCell, EscrowActor, EscrowDeps, EscrowInfo,
    },
    participant::ParticipantActor,
    protocol::crypto::Address,
    stats::{TrackedActor, TrackedAddr},
    store::{ns, retry::retry_delay, StoreError},
};

/// Delay before a respawn, so a crash loop cannot spin the arbiter.
const RESPAWN_DELAY: Duration = Duration::from_millis(20);

impl Directory {
    /// Starts (or restarts) an escrow's actor from the store.
    pub(crate) fn spawn_escrow(
        &mut self,
        escrow_id: &str,
        ctx: &mut Context<Self>,
    ) -> Result<(), DirectoryError> {
        let Some(entry) = self.escrows.get(escrow_id) else {
            return Err(DirectoryError::UnknownEscrow(escrow_id.to_string()));
        };
        let (info, budget) = (entry.info.clone(), entry.budget.clone());
        let actor = self.build_escrow(info, budget, ctx)?;
        let addr = actor.start_tracked();
        if let Some(e) = self.escrows.get_mut(escrow_id) {
            e.slot.addr = Some(addr);
        }
        self.publish_board();
        Ok(())
    }

    fn build_escrow(
        &self,
        info: Arc<EscrowInfo>,
        budget: BudgetCell,
        ctx: &mut Context<Self>,
    ) -> Result<EscrowActor, DirectoryError> {
        let id = info.escrow_id.clone();
        let start_err = |e: String| DirectoryError::Start(id.clone(), e);
        // The lease first: the log read after it holds every diff of the previous owner.
        self.deps.store.claim_escrow(&id)?;
        let source = key::stored_or_error(&self.deps.store, &id)?;
        let signing = key::escrow_key(source.as_ref(), &self.deps.key)
            .map_err(|e| start_err(e.to_string()))?;
        let warm = self.deps.store.load_warm_deltas(&id)?;
        let started = std::time::Instant::now();
        let (session, from, replayed) = match restore_durable(&*self.deps.store, info, &warm) {
            Ok(r) => r,
            Err(RestoreError::Store(e)) => return Err(e.into()),
            Err(RestoreError::Session(e)) => return Err(start_err(e.to_string())),
        };
        self.deps
            .metrics
            .escrow_restores
            .with_label_values(&[from.as_str()])
            .inc();
        info!(self.deps.log, "escrow state restored"; "stage" => "escrow_restored",
            "escrow" => &id, "from" => from.as_str(), "nonce" => session.nonce(),
            "replayed" => replayed, "ms" => u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        let mut session = session.with_grants(self.deps.warm.cache().clone());
        if let Some(record) = self.deps.store.get(ns::SESSIONS, &id)? {
            if let Some(map) = record.get("host_sync").and_then(|m| m.as_object()) {
                for (addr, nonce) in map {
                    if let (Ok(a), Some(n)) = (Address::parse(addr), nonce.as_u64()) {
                        session.set_host_sync(a, n);
                    }
                }
            }
        }
        let now_ms = self.deps.clock.now_ms();
        let mut orphans = session.unsettled_entries(now_ms);
        for o in orphans.iter_mut().filter(|o| o.confirmed_at.is_none()) {
            o.payload = payloads::restored_payload(&*self.deps.store, &id, o.nonce);
        }
        // The restored state is what the pick sees until the actor publishes.
        let st = session.state();
        let active = st.phase() == crate::protocol::state::Phase::Active;
        let settling = u64::try_from(orphans.len()).unwrap_or(u64::MAX);
        budget.publish(st.balance(), session.nonce(), settling, active, true, None);
        let deps = EscrowDeps {
            key: signing,
            store: self.deps.store.clone(),
            clock: self.deps.clock.clone(),
            log: self.deps.log.clone(),
            cfg: self.deps.escrow_cfg.clone(),
            outcomes: self.tracked_address(ctx).recipient(),
            fault_injection: self.deps.fault_injection,
            metrics: self.deps.metrics.clone(),
            settings: self.settings.clone(),
            actors: self.deps.actors.clone(),
            warm: self.deps.warm.clone(),
            budget,
        };
        Ok(EscrowActor::new(session, deps)
            .with_orphans(orphans)
            .with_death_notice(self.tracked_address(ctx).recipient()))
    }

    /// The participant's actor, spawned (from its stored record) on first use.
    pub(crate) fn participant(
        &mut self,
        address: &Address,
        ctx: &mut Context<Self>,
    ) -> Result<TrackedAddr<ParticipantActor>, DirectoryError> {
        let slot = self.participants.entry(address.clone()).or_default();
        if slot.failed {
            return Err(DirectoryError::Start(
                address.to_string(),
                "failed too often".into(),
            ));
        }
        if let Some(addr) = slot.addr.as_ref().filter(|a| a.connected()) {
            return Ok(addr.clone());
        }
        let deps = self.participant_deps(ctx);
        let addr = ParticipantActor::load(address.clone(), deps).start_tracked();
        let slot = self.participants.entry(address.clone()).or_default();
        slot.addr = Some(addr.clone());
        Ok(addr)
    }

    /// Runs `f` once every write issued so far is durable (so a respawned actor reads everything
    /// its predecessor wrote), and not before `RESPAWN_DELAY` (so a crash loop cannot spin).
    /// Shown in the directory's stats as timer `name` while pending.
    fn after_flush(
        &mut self,
        ctx: &mut Context<Self>,
        name: String,
        f: impl FnOnce(&mut Self, &mut Context<Self>) + 'static,
    ) {
        let flush = self.deps.store.flush();
        let delay_ms = i64::try_from(RESPAWN_DELAY.as_millis()).unwrap_or(i64::MAX);
        let due = self.deps.clock.now_ms().saturating_add(delay_ms);
        let generation = self.stats.arm_timer(name.clone(), due);
        let fut = async move {
            tokio::time::sleep(RESPAWN_DELAY).await;
            flush.await
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            act.stats.disarm_timer(&name, generation);
            if let Err(e) = res {
                warn!(act.deps.log, "store flush before respawn failed"; "error" => %e);
            }
            f(act, ctx);
        }));
    }

    /// Respawns an escrow after its death. While the database is unavailable the respawn is
    /// retried with back-off ([`retry_delay`]) until it is back, uncharged: `failures` counts
    /// the attempts the outage failed so far.
    fn respawn_escrow(&mut self, id: String, failures: u32, ctx: &mut Context<Self>) {
        let running = self
            .escrows
            .get(&id)
            .map(|e| e.slot.failed || e.slot.addr.as_ref().is_some_and(|a| a.connected()));
        if running != Some(false) {
            return; // removed, disabled or already running again
        }
        match self.spawn_escrow(&id, ctx) {
            Ok(()) if failures > 0 => {
                info!(self.deps.log, "escrow respawned once the database was back";
                    "stage" => "escrow_respawn_recovered", "escrow" => &id, "attempts" => failures + 1);
            }
            Ok(()) => {}
            Err(DirectoryError::Store(e)) if e.is_unavailable() => {
                let failures = failures.saturating_add(1);
                let delay = retry_delay(failures);
                self.deps
                    .metrics
                    .restarts
                    .with_label_values(&["escrow", "deferred"])
                    .inc();
                warn!(self.deps.log, "escrow respawn deferred: the database is unavailable";
                    "stage" => "escrow_respawn_deferred", "escrow" => &id,
                    "attempt" => failures, "retry_in_ms" => delay.as_millis(), "error" => %e);
                let name = format!("respawn escrow {id}");
                let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
                let due = self.deps.clock.now_ms().saturating_add(delay_ms);
                let generation = self.stats.arm_timer(name.clone(), due);
                ctx.run_later(delay, move |act, ctx| {
                    act.stats.disarm_timer(&name, generation);
                    act.respawn_escrow(id, failures, ctx);
                });
            }
            Err(e) => {
                if !self.not_owned(&id, &e) {
                    error!(self.deps.log, "escrow respawn failed"; "stage" => "escrow_respawn_failed",
                        "escrow" => &id, "error" => %e);
                }
            }
        }
    }

    /// Counts a restart; `false` when the entity is past its budget.
    fn charge_restart<A: Actor>(
        slot: &mut Slot<A>,
        now_ms: i64,
        budget: super::RestartBudget,
    ) -> bool {
        slot.restarts.push_back(now_ms);
        while slot
            .restarts
            .front()
            .is_some_and(|t| now_ms.saturating_sub(*t) > budget.window_ms)
        {
            slot.restarts.pop_front();
        }
        slot.restarts.len() <= budget.max_restarts
    }
}

/// What the death of an entity actor leads to.
enum Death {
    /// A newer actor already runs (or the entity is gone): nothing to do.
    Ignored,
    /// Past its restart budget: the entity is disabled.
    Disabled,
    /// Respawn it from the store.
    Respawn,
}

impl Directory {
    /// Counts the death of the actor in `slot` against the restart budget, unless a database
    /// outage caused it (that passes by itself; see [`Directory::respawn_escrow`]).
    fn on_death<A: Actor>(
        slot: &mut Slot<A>,
        cause: StopCause,
        now_ms: i64,
        budget: super::RestartBudget,
    ) -> Death {
        if slot.addr.as_ref().is_some_and(|a| a.connected()) {
            return Death::Ignored;
        }
        slot.addr = None;
        if cause == StopCause::StoreUnavailable {
            return Death::Respawn;
        }
        if !Self::charge_restart(slot, now_ms, budget) {
            slot.failed = true;
            return Death::Disabled;
        }
        Death::Respawn
    }
}

impl Handler<Died> for Directory {
    type Result = ();

    fn handle(&mut self, msg: Died, ctx: &mut Self::Context) {
        let now = self.deps.clock.now_ms();
        let budget = self.deps.budget;
        let (kind, death, participant) = match msg.kind {
            ActorKind::Escrow => match self.escrows.get_mut(&msg.id) {
                // Stopped for its handoff: another replica takes it.
                Some(e) if e.handing_over => return,
                Some(e) => (
                    "escrow",
                    Self::on_death(&mut e.slot, msg.cause, now, budget),
                    None,
                ),
                None => return,
            },
            ActorKind::Participant => {
                let Ok(address) = Address::parse(&msg.id) else {
                    return;
                };
                match self.participants.get_mut(&address) {
                    Some(p) => (
                        "participant",
                        Self::on_death(p, msg.cause, now, budget),
                        Some(address),
                    ),
                    None => return,
                }
            }
            ActorKind::Race => return,
        };
        if participant.is_none() {
            self.publish_board();
        }
        let restarts = &self.deps.metrics.restarts;
        match death {
            Death::Ignored => {}
            Death::Disabled => {
                restarts.with_label_values(&[kind, "disabled"]).inc();
                error!(self.deps.log, "{} failed too often; disabled", kind;
                    "stage" => "actor_failed", "kind" => kind, kind => &msg.id);
            }
            Death::Respawn => {
                restarts.with_label_values(&[kind, "respawned"]).inc();
                warn!(self.deps.log, "{} actor died; respawning from the store", kind;
                    "stage" => "actor_respawn", "kind" => kind, kind => &msg.id);
                let (id, name) = (msg.id.clone(), format!("respawn {kind} {}", msg.id));
                self.after_flush(ctx, name, move |act, ctx| match participant {
                    Some(address) => {
                        let _ = act.participant(&address, ctx);
                    }
                    None => act.respawn_escrow(id, 0, ctx),
                });
            }
        }
    }
}

impl Handler<AddEscrow> for Directory {
    type Result = ResponseActFuture<Self, Result<(), DirectoryError>>;

    fn handle(&mut self, msg: AddEscrow, _: &mut Self::Context) -> Self::Result {
        let id = msg.info.escrow_id.clone();
        if let Some(existing) = self.escrows.get(&id) {
            let same = *existing.info == msg.info;
            return Box::pin(fut::ready(if same {
                Ok(())
            } else {
                Err(DirectoryError::Start(
                    id,
                    "already registered with different chain data".into(),
                ))
            }));
        }
        let value = match serde_json::to_value(&msg.info) {
            Ok(v) => v,
            Err(e) => return Box::pin(fut::ready(Err(DirectoryError::Start(id, e.to_string())))),
        };
        let key_ack = match msg.key.as_ref().map(serde_json::to_value) {
            Some(Ok(k)) => Some(self.deps.store.put(NS_ESCROW_KEYS, &id, k)),
            Some(Err(e)) => {
                return Box::pin(fut::ready(Err(DirectoryError::Start(id, e.to_string()))))
            }
            None => None,
        };
        let ack = self.deps.store.put(ns::ESCROWS, &id, value);
        let ack = async move {
            if let Some(k) = key_ack {
                k.await?;
            }
            ack.await
        };
        let info = Arc::new(msg.info);
        Box::pin(ack.into_actor(self).map(move |res, act, ctx| {
            res?;
            act.escrows.insert(id.clone(), EscrowSlot::new(info, false));
            act.publish_board();
            match act.spawn_escrow(&id, ctx) {
                // Registered here, but another replica claimed it first: it runs there.
                Err(DirectoryError::Store(StoreError::LeaseHeld { .. })) => {}
                started => started?,
            }
            info!(act.deps.log, "escrow registered"; "stage" => "escrow_registered", "escrow" => &id);
            Ok(())
        }))
    }
}

impl Handler<RemoveEscrow> for Directory {
    type Result = ResponseActFuture<Self, Result<(), DirectoryError>>;

    fn handle(&mut self, msg: RemoveEscrow, _: &mut Self::Context) -> Self::Result {
        let Some(entry) = self.escrows.remove(&msg.escrow_id) else {
            return Box::pin(fut::ready(Err(DirectoryError::UnknownEscrow(
                msg.escrow_id,
            ))));
        };
        self.publish_board();
        if let Some(addr) = entry.slot.addr {
            addr.do_send(Retire);
        }
        let store = self.deps.store.clone();
        let id = msg.escrow_id.clone();
        let purge = msg.purge;
        Box::pin(
            async move {
                store.delete(ns::ESCROWS, &id).await?;
                store.delete(NS_ESCROW_KEYS, &id).await?;
                if purge {
                    store.delete(ns::SESSIONS, &id).await?;
                    store.delete(ns::CHECKPOINTS, &id).await?;
                    store.delete_diffs(&id).await?;
                }
                Ok(())
            }
            .into_actor(self),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::RestartBudget;

    #[test]
    fn a_database_outage_is_not_charged_to_the_restart_budget() {
        let budget = RestartBudget {
            max_restarts: 1,
            window_ms: 60_000,
        };
        let mut slot: Slot<EscrowActor> = Slot::default();
        for t in 0..10 {
            let death = Directory::on_death(&mut slot, StopCause::StoreUnavailable, t, budget);
            assert!(matches!(death, Death::Respawn));
        }
        assert!(slot.restarts.is_empty());
        assert!(matches!(
            Directory::on_death(&mut slot, StopCause::Failed, 10, budget),
            Death::Respawn
        ));
        assert!(matches!(
            Directory::on_death(&mut slot, StopCause::Failed, 11, budget),
            Death::Disabled
        ));
    }
}
