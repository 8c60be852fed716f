//! The escrow actor's repair messages (docs/health.md §6): plans and steps of the per-host repair
//! actors over `repair.rs`, give-up, admin triggers and the debug view. No state or timers of its
//! own: the repair actors run the ticks; routing holds the blocks.

use actix::prelude::*;

use super::super::{
    messages::{ForgetDivergence, GetRepairStates, TriggerRepair},
    repair,
    session::SessionError,
};
use super::EscrowActor;
use crate::repair::messages::{
    GetRepairState, PlanRepair, RepairGaveUp, RepairNow, RepairPlan, RepairState, RepairStep,
    RepairVerdict,
};

impl Handler<PlanRepair> for EscrowActor {
    type Result = Result<RepairPlan, String>;

    fn handle(&mut self, msg: PlanRepair, _: &mut Self::Context) -> Self::Result {
        repair::plan(&self.session, &self.durable, &self.deps, &msg.participant)
    }
}

impl Handler<RepairStep> for EscrowActor {
    type Result = ResponseActFuture<Self, Result<RepairVerdict, SessionError>>;

    fn handle(&mut self, msg: RepairStep, _: &mut Self::Context) -> Self::Result {
        let signers = match &msg {
            RepairStep::CatchUp {
                participant,
                receipt,
            } => self.session.signers_to_check(participant, None, receipt),
            RepairStep::Signature {
                participant,
                nonce,
                signature,
            } => (self.session)
                .fetched_signer_to_check(participant, *nonce, signature)
                .into_iter()
                .collect(),
            RepairStep::HostBehind { .. } => Vec::new(),
        };
        let check = self.check_warm_signers(signers);
        Box::pin(check.into_actor(self).map(move |(), act, ctx| {
            let (session, durable, routing) =
                (&mut act.session, &mut act.durable, &mut act.routing);
            let verdict = repair::step(session, durable, routing, &act.deps, msg);
            // A host routable again: waiting races may take it, and the directory's pick must
            // see the escrow routable now, not at the next budget tick.
            if matches!(verdict, Ok(RepairVerdict::Unblocked)) {
                act.pump(ctx);
            }
            verdict
        }))
    }
}

impl Handler<RepairGaveUp> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: RepairGaveUp, _: &mut Self::Context) {
        self.routing.repair_gave_up(msg.participant);
    }
}

impl Handler<TriggerRepair> for EscrowActor {
    type Result = bool;

    fn handle(&mut self, msg: TriggerRepair, _: &mut Self::Context) -> bool {
        match self.routing.repair(&msg.participant) {
            Some(addr) => {
                addr.do_send(RepairNow);
                true
            }
            None => false,
        }
    }
}

impl Handler<GetRepairStates> for EscrowActor {
    type Result = ResponseFuture<Vec<RepairState>>;

    fn handle(&mut self, _: GetRepairStates, _: &mut Self::Context) -> Self::Result {
        let addrs = self.routing.repairs();
        Box::pin(async move {
            let calls = addrs.iter().map(|a| a.send(GetRepairState));
            futures::future::join_all(calls)
                .await
                .into_iter()
                .filter_map(Result::ok)
                .collect()
        })
    }
}

impl Handler<ForgetDivergence> for EscrowActor {
    type Result = ();

    fn handle(&mut self, msg: ForgetDivergence, ctx: &mut Self::Context) {
        self.routing.forget_divergence(&msg.participant);
        self.pump(ctx);
    }
}
