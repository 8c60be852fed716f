//! The participant actor's admin, settings and fault-injection handlers (the outcome path and
//! the health tick are in `actor.rs`). Admin changes are persisted before they answer.

use std::{sync::Arc, time::Duration};

use actix::prelude::*;
use slog::{info, warn};

use super::{
    actor::{stored_record, ParticipantActor},
    messages::{
        ApplyHealthSettings, ForceEject, Forget, ParticipantView, ReloadRecord, Unquarantine,
    },
    record::ParticipantRecord,
};
use crate::{
    escrow::messages::{InjectPanic, InjectStall},
    policy::health::{self, HealthEffect, HealthStatus},
    store::ns,
};

impl Handler<Unquarantine> for ParticipantActor {
    type Result = ResponseActFuture<Self, Result<Arc<ParticipantView>, String>>;

    fn handle(&mut self, _: Unquarantine, ctx: &mut Self::Context) -> Self::Result {
        let next = health::unquarantine(&self.record.health, &self.deps.settings, self.now());
        info!(self.log, "unquarantined by an admin"; "stage" => "participant_unquarantined");
        self.admin_change(next, vec![], ctx)
    }
}

impl Handler<Forget> for ParticipantActor {
    type Result = ResponseActFuture<Self, Result<Arc<ParticipantView>, String>>;

    fn handle(&mut self, _: Forget, ctx: &mut Self::Context) -> Self::Result {
        info!(self.log, "forgotten by an admin"; "stage" => "participant_forgotten");
        self.record = ParticipantRecord {
            health: self.record.health.clone(),
            ..ParticipantRecord::new(self.address.clone())
        };
        self.commit(health::forget(), vec![], ctx);
        let ack = self
            .deps
            .store
            .delete(ns::PARTICIPANTS, self.address.as_str());
        Box::pin(ack.into_actor(self).map(|res, act, _| {
            res.map_err(|e| e.to_string())?;
            Ok(act.view())
        }))
    }
}

impl Handler<ForceEject> for ParticipantActor {
    type Result = ResponseActFuture<Self, Result<Arc<ParticipantView>, String>>;

    fn handle(&mut self, _: ForceEject, ctx: &mut Self::Context) -> Self::Result {
        let now = self.now();
        let mut next = self.record.health.clone();
        let until_ms = now.saturating_add(self.deps.settings.base_ejection_ms);
        next.state = HealthStatus::Ejected {
            until_ms,
            level: next.level,
        };
        next.ejections = next.ejections.saturating_add(1);
        self.admin_change(
            next,
            vec![HealthEffect::Ejected {
                until_ms,
                level: self.record.health.level,
            }],
            ctx,
        )
    }
}

impl Handler<ReloadRecord> for ParticipantActor {
    type Result = ();

    fn handle(&mut self, _: ReloadRecord, ctx: &mut Self::Context) {
        let loaded = stored_record(&self.address, &self.deps.store, &self.log);
        let health = loaded.health.clone();
        // `commit` moves the state gauges from the state held until now.
        self.record = ParticipantRecord {
            health: self.record.health.clone(),
            ..loaded
        };
        info!(self.log, "health reloaded from the store (changed by another replica)";
            "stage" => "participant_reloaded", "state" => health.state.label());
        self.commit(health, vec![], ctx);
    }
}

impl Handler<ApplyHealthSettings> for ParticipantActor {
    type Result = ();

    fn handle(&mut self, msg: ApplyHealthSettings, ctx: &mut Self::Context) {
        self.deps.settings = msg.0;
        self.arm_tick(ctx);
    }
}

impl Handler<InjectPanic> for ParticipantActor {
    type Result = ();

    #[allow(clippy::panic)]
    fn handle(&mut self, _: InjectPanic, _: &mut Self::Context) {
        if self.deps.fault_injection {
            panic!(
                "fault injection: participant {} panics on request",
                self.address
            );
        }
    }
}

impl Handler<InjectStall> for ParticipantActor {
    type Result = ();

    fn handle(&mut self, msg: InjectStall, ctx: &mut Self::Context) {
        if self.deps.fault_injection {
            warn!(self.log, "fault injection: the mailbox stalls"; "stage" => "fault_injected",
                "stall_ms" => msg.ms);
            let stall = tokio::time::sleep(Duration::from_millis(msg.ms));
            ctx.wait(stall.into_actor(self));
        }
    }
}
