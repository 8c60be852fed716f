//! Participant routing in the directory: outcomes and admin calls to participant actors, health
//! changes to the escrows that contain the participant, live health settings.

use std::sync::Arc;

use actix::prelude::*;
use futures::future::join_all;
use slog::error;
use tokio::sync::mpsc::UnboundedSender;

use super::{Directory, DirectoryError};
use crate::{
    participant::{
        messages::{
            ApplyHealthSettings, ForceEject, Forget, GetParticipant, HealthChanged, HealthDecided,
            ParticipantView, ReloadRecord, Unquarantine,
        },
        ParticipantActor, ParticipantDeps,
    },
    policy::settings::HealthSettings,
    protocol::crypto::Address,
    stats::{TrackedActor, TrackedAddr},
    store::ns,
};

/// Key of the health settings record.
pub const HEALTH_SETTINGS_KEY: &str = "health";

/// Admin operations on participants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParticipantOp {
    Unquarantine,
    Forget,
    ForceEject,
}

/// Runs an admin operation on one participant (`Some`) or on every known one (`None`).
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<Arc<ParticipantView>>, DirectoryError>")]
pub struct AdminParticipants {
    pub address: Option<Address>,
    pub op: ParticipantOp,
}

/// Every known participant's view (the participants of every registered escrow included).
#[derive(Debug, Message)]
#[rtype(result = "Vec<Arc<ParticipantView>>")]
pub struct ListParticipants;

/// Replaces the health settings (validated by the caller), persisted before the answer, then
/// applied live by every escrow and participant.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), DirectoryError>")]
pub struct SetHealthSettings(pub HealthSettings);

/// Another replica changed participants' health (PostgreSQL, shared health): every targeted
/// participant (`None`: all) reloads its record from the store; `forget` also clears the
/// escrows' divergence marks, as a local forget does. Answers how many were reloaded.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct ReloadParticipants {
    pub address: Option<Address>,
    pub forget: bool,
}

/// Another replica changed the health settings: reload them from the store and apply them.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ReloadHealthSettings;

/// Where participant actors spawned from now on send their own health decisions once persisted
/// (the edge shares them with the other replicas).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ShareHealthDecisions(pub UnboundedSender<HealthDecided>);

/// The current health settings.
#[derive(Debug, Message)]
#[rtype(result = "Arc<HealthSettings>")]
pub struct GetHealthSettings;

impl Directory {
    pub(crate) fn participant_deps(&self, ctx: &mut Context<Self>) -> ParticipantDeps {
        ParticipantDeps {
            store: self.deps.store.clone(),
            clock: self.deps.clock.clone(),
            log: self.deps.log.clone(),
            settings: self.settings.clone(),
            metrics: self.deps.metrics.clone(),
            fault_injection: self.deps.fault_injection,
            changes: self.tracked_address(ctx).recipient(),
            on_stop: self.tracked_address(ctx).recipient(),
            decisions: self.decisions.clone(),
            actors: self.deps.actors.clone(),
        }
    }

    /// Every address that appears in a registered escrow, plus any participant already known.
    fn all_addresses(&self) -> Vec<Address> {
        let mut out: Vec<Address> = self.participants.keys().cloned().collect();
        for e in self.escrows.values() {
            for h in &e.info.hosts {
                if !out.contains(&h.address) {
                    out.push(h.address.clone());
                }
            }
        }
        out.sort();
        out
    }

    /// Clears the escrows' divergence marks of `only` (`None`: every participant).
    fn forget_divergence(&self, only: Option<&Address>) {
        let targets = match only {
            Some(a) => vec![a.clone()],
            None => self.all_addresses(),
        };
        for e in self.escrows.values() {
            if let Some(addr) = &e.slot.addr {
                for t in &targets {
                    addr.do_send(crate::escrow::messages::ForgetDivergence {
                        participant: t.clone(),
                    });
                }
            }
        }
    }

    /// Makes `settings` the live ones of every participant and escrow.
    fn apply_settings(&mut self, settings: Arc<HealthSettings>) {
        self.settings = settings.clone();
        for p in self.participants.values() {
            if let Some(a) = &p.addr {
                a.do_send(ApplyHealthSettings(settings.clone()));
            }
        }
        for e in self.escrows.values() {
            if let Some(a) = &e.slot.addr {
                a.do_send(ApplyHealthSettings(settings.clone()));
            }
        }
    }

    pub(super) fn participant_addrs(
        &mut self,
        only: Option<Address>,
        ctx: &mut Context<Self>,
    ) -> Vec<TrackedAddr<ParticipantActor>> {
        let targets = match only {
            Some(a) => vec![a],
            None => self.all_addresses(),
        };
        targets
            .iter()
            .filter_map(|a| self.participant(a, ctx).ok())
            .collect()
    }
}

impl Handler<HealthChanged> for Directory {
    type Result = ();

    fn handle(&mut self, msg: HealthChanged, _: &mut Self::Context) {
        for e in self.escrows.values() {
            if e.info.hosts.iter().any(|h| h.address == msg.address) {
                if let Some(addr) = &e.slot.addr {
                    addr.do_send(msg.clone());
                }
            }
        }
    }
}

impl Handler<AdminParticipants> for Directory {
    type Result = ResponseFuture<Result<Vec<Arc<ParticipantView>>, DirectoryError>>;

    fn handle(&mut self, msg: AdminParticipants, ctx: &mut Self::Context) -> Self::Result {
        if msg.op == ParticipantOp::Forget {
            self.forget_divergence(msg.address.as_ref());
        }
        let addrs = self.participant_addrs(msg.address, ctx);
        Box::pin(async move {
            let calls = addrs.iter().map(|a| async move {
                match msg.op {
                    ParticipantOp::Unquarantine => a.send(Unquarantine).await,
                    ParticipantOp::Forget => a.send(Forget).await,
                    ParticipantOp::ForceEject => a.send(ForceEject).await,
                }
            });
            let mut out = Vec::new();
            for r in join_all(calls).await {
                match r {
                    Ok(Ok(view)) => out.push(view),
                    Ok(Err(e)) => return Err(DirectoryError::Admin(e)),
                    Err(e) => return Err(DirectoryError::Admin(e.to_string())),
                }
            }
            Ok(out)
        })
    }
}

impl Handler<ListParticipants> for Directory {
    type Result = ResponseFuture<Vec<Arc<ParticipantView>>>;

    fn handle(&mut self, _: ListParticipants, ctx: &mut Self::Context) -> Self::Result {
        let addrs = self.participant_addrs(None, ctx);
        Box::pin(async move {
            let views = join_all(addrs.iter().map(|a| a.send(GetParticipant))).await;
            views.into_iter().filter_map(Result::ok).collect()
        })
    }
}

impl Handler<SetHealthSettings> for Directory {
    type Result = ResponseActFuture<Self, Result<(), DirectoryError>>;

    fn handle(&mut self, msg: SetHealthSettings, _: &mut Self::Context) -> Self::Result {
        let value = serde_json::to_value(&msg.0).unwrap_or_default();
        let ack = self
            .deps
            .store
            .put(ns::SETTINGS, HEALTH_SETTINGS_KEY, value);
        let settings = Arc::new(msg.0);
        Box::pin(ack.into_actor(self).map(move |res, act, _| {
            res?;
            act.apply_settings(settings);
            Ok(())
        }))
    }
}

impl Handler<ReloadParticipants> for Directory {
    type Result = usize;

    fn handle(&mut self, msg: ReloadParticipants, ctx: &mut Self::Context) -> usize {
        if msg.forget {
            self.forget_divergence(msg.address.as_ref());
        }
        let addrs = self.participant_addrs(msg.address, ctx);
        for a in &addrs {
            a.do_send(ReloadRecord);
        }
        addrs.len()
    }
}

impl Handler<ReloadHealthSettings> for Directory {
    type Result = ();

    fn handle(&mut self, _: ReloadHealthSettings, _: &mut Self::Context) {
        let settings = load_settings(self);
        if settings != *self.settings {
            self.apply_settings(Arc::new(settings));
        }
    }
}

impl Handler<ShareHealthDecisions> for Directory {
    type Result = ();

    fn handle(&mut self, msg: ShareHealthDecisions, _: &mut Self::Context) {
        self.decisions = Some(msg.0);
    }
}

impl Handler<GetHealthSettings> for Directory {
    type Result = MessageResult<GetHealthSettings>;

    fn handle(&mut self, _: GetHealthSettings, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.settings.clone())
    }
}

/// Loads the persisted health settings (defaults when absent or unreadable).
pub(crate) fn load_settings(dir: &Directory) -> HealthSettings {
    match dir.deps.store.get(ns::SETTINGS, HEALTH_SETTINGS_KEY) {
        Ok(Some(v)) => serde_json::from_value(v).unwrap_or_else(|e| {
            error!(dir.deps.log, "health settings unreadable; using defaults"; "error" => %e);
            HealthSettings::default()
        }),
        _ => HealthSettings::default(),
    }
}
