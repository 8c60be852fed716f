//! `ParticipantActor`: one per participant address, process-wide (shared by every escrow in which
//! the address holds slots).
//!
//! - **Owns** the participant's health record and perf estimates.
//! - **Survives a restart**: the record is written to the store on every change and reloaded when
//!   the directory respawns the actor (after a panic or any other stop).
//! - **Timers**: none yet (strike decay and ejection timers belong to the health policy).
//! - **Who holds its `Addr`**: the `Directory`, which routes outcomes to it.

use std::sync::Arc;

use actix::prelude::*;
use slog::{o, warn, Logger};

use super::{
    messages::{GetParticipant, ParticipantView},
    record::ParticipantRecord,
};
use crate::{
    clock::SharedClock,
    directory::{ActorKind, Died},
    escrow::messages::InjectPanic,
    outcome::ParticipantOutcome,
    protocol::crypto::Address,
    store::{ns, SharedStore},
};

/// The participant actor (see the module docs).
pub struct ParticipantActor {
    address: Address,
    record: ParticipantRecord,
    store: SharedStore,
    clock: SharedClock,
    log: Logger,
    fault_injection: bool,
    handled: u64,
    on_stop: Option<Recipient<Died>>,
}

impl ParticipantActor {
    /// Loads the participant's record from the store (or starts a fresh one).
    pub fn load(
        address: Address,
        store: SharedStore,
        clock: SharedClock,
        log: &Logger,
        fault_injection: bool,
    ) -> ParticipantActor {
        let log = log.new(o!("participant" => address.to_string()));
        let record = match store.get(ns::PARTICIPANTS, address.as_str()) {
            Ok(Some(v)) => serde_json::from_value(v).unwrap_or_else(|e| {
                warn!(log, "participant record unreadable; starting fresh"; "error" => %e);
                ParticipantRecord::new(address.clone())
            }),
            Ok(None) => ParticipantRecord::new(address.clone()),
            Err(e) => {
                warn!(log, "participant record not loaded"; "error" => %e);
                ParticipantRecord::new(address.clone())
            }
        };
        ParticipantActor {
            address,
            record,
            store,
            clock,
            log,
            fault_injection,
            handled: 0,
            on_stop: None,
        }
    }

    /// Tells `recipient` when the actor stops (panics included).
    pub fn with_death_notice(mut self, recipient: Recipient<Died>) -> Self {
        self.on_stop = Some(recipient);
        self
    }

    fn persist(&self) {
        let value = serde_json::to_value(&self.record).unwrap_or_default();
        let ack = self
            .store
            .put(ns::PARTICIPANTS, self.address.as_str(), value);
        let log = self.log.clone();
        actix::spawn(async move {
            if let Err(e) = ack.await {
                warn!(log, "participant record not persisted"; "stage" => "store_error", "error" => %e);
            }
        });
    }
}

impl Actor for ParticipantActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(1024);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if let Some(r) = &self.on_stop {
            r.do_send(Died {
                kind: ActorKind::Participant,
                id: self.address.to_string(),
            });
        }
    }
}

impl Handler<ParticipantOutcome> for ParticipantActor {
    type Result = ();

    fn handle(&mut self, msg: ParticipantOutcome, _: &mut Self::Context) {
        self.handled += 1;
        let next = self.record.with_outcome(&msg.outcome, self.clock.now_ms());
        self.record = next;
        self.persist();
    }
}

impl Handler<GetParticipant> for ParticipantActor {
    type Result = MessageResult<GetParticipant>;

    fn handle(&mut self, _: GetParticipant, _: &mut Self::Context) -> Self::Result {
        MessageResult(Arc::new(ParticipantView {
            address: self.address.clone(),
            record: self.record.clone(),
            handled: self.handled,
        }))
    }
}

impl Handler<InjectPanic> for ParticipantActor {
    type Result = ();

    #[allow(clippy::panic)]
    fn handle(&mut self, _: InjectPanic, _: &mut Self::Context) {
        if self.fault_injection {
            panic!(
                "fault injection: participant {} panics on request",
                self.address
            );
        }
    }
}
