//! The escrow's side of the repair loop (docs/health.md §6): a participant whose state diverged from
//! ours is withheld in this escrow only (its nonces carry no inference) and gets exactly one
//! `RepairActor` (kept by host routing); the escrow plans each tick (durable canonical diffs the
//! host lacks) and judges what the host answers. Only a signature over our root, verified here,
//! clears the block.

use slog::{info, warn};

use super::{
    diff_log::DiffPath,
    durable::Durable,
    routing::Routing,
    session::{Session, SessionError},
    EscrowActor, EscrowDeps,
};
use crate::{
    protocol::crypto::Address,
    repair::{
        messages::{RepairPlan, RepairStep, RepairVerdict},
        RepairActor, RepairDeps,
    },
    stats::{TrackedActor, TrackedAddr},
};

/// First detection of divergence of `host`: withhold it here and start its repair (once).
/// `escrow` is this actor's address, for the repair to call back.
pub(super) fn start(
    routing: &mut Routing,
    session: &Session,
    deps: &EscrowDeps,
    host: &Address,
    escrow: TrackedAddr<EscrowActor>,
) {
    if routing.is_repairing(host) {
        return;
    }
    let Some(slots) = session.info().host(host).map(|h| h.slots.clone()) else {
        return;
    };
    warn!(deps.log, "participant state diverged; withheld in this escrow";
        "stage" => "escrow_participant_state_blocked", "host" => host.short());
    let actor = RepairActor::new(
        RepairDeps {
            escrow,
            clock: deps.clock.clone(),
            log: deps.log.clone(),
            metrics: deps.metrics.clone(),
            settings: deps.settings.clone(),
            actors: deps.actors.clone(),
        },
        &session.info().escrow_id,
        host.clone(),
        slots,
    );
    routing.add_repair(host.clone(), actor.start_tracked());
}

/// The next tick's plan: the durable diffs `participant` lacks, in signed chunks. Only durable
/// diffs may reach a host: the plan stops at the last acknowledged nonce.
pub(super) fn plan(
    session: &Session,
    durable: &Durable,
    deps: &EscrowDeps,
    participant: &Address,
) -> Result<RepairPlan, String> {
    let info = session.info().clone();
    let host = info
        .host(participant)
        .ok_or("not a participant of this escrow")?;
    let durable_nonce = durable.durable_nonce();
    let after = session.catch_up_after(participant);
    let top = durable_nonce.min(session.nonce());
    let target_nonce = if top > after {
        top
    } else {
        session.host_sync(participant).min(durable_nonce)
    };
    let chunks = durable
        .prelude(session, deps, DiffPath::Repair, (after, top))
        .map_err(|e| e.to_string())?;
    Ok(RepairPlan {
        chat_url: info.session_url(host, "chat/completions"),
        signatures_url: info.session_url(host, "signatures"),
        chunks,
        signer: super::wire_cache::signer(session, deps),
        target_nonce,
    })
}

/// Judges what the host answered to one repair step.
pub(super) fn step(
    session: &mut Session,
    durable: &mut Durable,
    routing: &mut Routing,
    deps: &EscrowDeps,
    step: RepairStep,
) -> Result<RepairVerdict, SessionError> {
    match step {
        RepairStep::CatchUp {
            participant,
            receipt,
        } => {
            super::diff_log::recall_root(session, deps, receipt.nonce);
            session.process_receipt(&participant, None, &receipt)?;
            durable.syncs_changed();
            Ok(RepairVerdict::Continue)
        }
        RepairStep::HostBehind { participant, holds } => {
            super::sync::rewind(session, deps, &participant, holds);
            durable.syncs_changed();
            Ok(RepairVerdict::Continue)
        }
        RepairStep::Signature {
            participant,
            nonce,
            signature,
        } => {
            session.accept_fetched_signature(&participant, nonce, &signature)?;
            info!(deps.log, "signature over our root verified"; "stage" => "repair_signature_verified",
                "host" => participant.short(), "nonce" => nonce);
            routing.unblock(&participant);
            Ok(RepairVerdict::Unblocked)
        }
    }
}
