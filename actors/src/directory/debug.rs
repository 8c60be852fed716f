//! The directory's debug surface: the live entity actors for the debug listing, and the fault
//! injection hooks (panic, stall) that tests and chaos drills use when `fault_injection` is on.

use actix::prelude::*;

use super::{
    ActorKind, Directory, DirectoryError, GetLiveActors, InjectPanicInto, InjectStallInto,
    LiveActors,
};
use crate::{
    escrow::{
        messages::{InjectPanic, InjectStall},
        EscrowActor,
    },
    participant::ParticipantActor,
    protocol::crypto::Address,
    stats::TrackedAddr,
};

impl Handler<GetLiveActors> for Directory {
    type Result = MessageResult<GetLiveActors>;

    fn handle(&mut self, _: GetLiveActors, ctx: &mut Self::Context) -> Self::Result {
        // Like `ListParticipants`: every host of a registered escrow gets its actor.
        let _ = self.participant_addrs(None, ctx);
        let escrows = self
            .escrows
            .iter()
            .filter_map(|(id, e)| Some((id.clone(), e.slot.addr.clone()?)))
            .filter(|(_, a)| a.connected())
            .collect();
        let participants = self
            .participants
            .iter()
            .filter_map(|(address, p)| Some((address.clone(), p.addr.clone()?)))
            .filter(|(_, a)| a.connected())
            .collect();
        MessageResult(LiveActors {
            escrows,
            participants,
        })
    }
}

/// The target of a fault injection.
enum Target {
    Escrow(TrackedAddr<EscrowActor>),
    Participant(TrackedAddr<ParticipantActor>),
    Nothing,
}

impl Directory {
    fn fault_target(
        &mut self,
        kind: ActorKind,
        id: &str,
        ctx: &mut Context<Self>,
    ) -> Result<Target, DirectoryError> {
        Ok(match kind {
            ActorKind::Escrow => Target::Escrow(
                self.escrows
                    .get(id)
                    .and_then(|e| e.slot.addr.clone())
                    .ok_or_else(|| DirectoryError::UnknownEscrow(id.to_string()))?,
            ),
            ActorKind::Participant => {
                let address = Address::parse(id)
                    .map_err(|e| DirectoryError::Start(id.to_string(), e.to_string()))?;
                Target::Participant(self.participant(&address, ctx)?)
            }
            ActorKind::Race => Target::Nothing,
        })
    }
}

impl Handler<InjectPanicInto> for Directory {
    type Result = Result<(), DirectoryError>;

    fn handle(&mut self, msg: InjectPanicInto, ctx: &mut Self::Context) -> Self::Result {
        match self.fault_target(msg.kind, &msg.id, ctx)? {
            Target::Escrow(a) => a.do_send(InjectPanic),
            Target::Participant(a) => a.do_send(InjectPanic),
            Target::Nothing => {}
        }
        Ok(())
    }
}

impl Handler<InjectStallInto> for Directory {
    type Result = Result<(), DirectoryError>;

    fn handle(&mut self, msg: InjectStallInto, ctx: &mut Self::Context) -> Self::Result {
        let stall = InjectStall { ms: msg.ms };
        match self.fault_target(msg.kind, &msg.id, ctx)? {
            Target::Escrow(a) => a.do_send(stall),
            Target::Participant(a) => a.do_send(stall),
            Target::Nothing => {}
        }
        Ok(())
    }
}
