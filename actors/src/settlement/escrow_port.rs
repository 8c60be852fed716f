//! [`EscrowSteps`] over the live escrow actor, found through the directory on every call (the
//! directory may have respawned it from its log since the last step).

use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;

use super::port::{EscrowSteps, FinalState, RoundDone, StepError};
use crate::{
    directory::{CloseEscrow, Directory, GetEscrow},
    escrow::{
        messages::{
            BeginDrain, CatchUpAll, ChargeInvalidSignature, CheckWarmSigner, FinalizeRound,
            GetFinalState,
        },
        EscrowActor,
    },
    protocol::crypto::Address,
    stats::TrackedAddr,
};

/// Poll interval while draining.
const DRAIN_POLL: Duration = Duration::from_secs(1);

/// The escrow `escrow_id` behind the directory.
#[derive(Clone)]
pub struct DirectoryEscrow {
    pub directory: TrackedAddr<Directory>,
    pub escrow_id: String,
}

async fn escrow(
    directory: &TrackedAddr<Directory>,
    id: &str,
) -> Result<TrackedAddr<EscrowActor>, StepError> {
    directory
        .send(GetEscrow {
            escrow_id: id.to_owned(),
        })
        .await
        .map_err(|_| StepError::Gone)?
        .ok_or_else(|| StepError::NotReady(format!("escrow {id} has no live actor")))
}

fn mailbox(e: MailboxError) -> StepError {
    StepError::NotReady(format!("escrow mailbox: {e}"))
}

impl EscrowSteps for DirectoryEscrow {
    fn drain(&self) -> LocalBoxFuture<'static, Result<(), StepError>> {
        let (d, id) = (self.directory.clone(), self.escrow_id.clone());
        Box::pin(async move {
            d.do_send(CloseEscrow {
                escrow_id: id.clone(),
            });
            loop {
                let p = escrow(&d, &id)
                    .await?
                    .send(BeginDrain)
                    .await
                    .map_err(mailbox)?;
                if p.waiting == 0 && p.unsettled == 0 {
                    return Ok(());
                }
                tokio::time::sleep(DRAIN_POLL).await;
            }
        })
    }

    fn finalize_round(&self) -> LocalBoxFuture<'static, Result<RoundDone, StepError>> {
        let (d, id) = (self.directory.clone(), self.escrow_id.clone());
        Box::pin(async move {
            let e = escrow(&d, &id).await?;
            e.send(FinalizeRound)
                .await
                .map_err(mailbox)?
                .map_err(StepError::Failed)
        })
    }

    fn final_state(&self) -> LocalBoxFuture<'static, Result<FinalState, StepError>> {
        let (d, id) = (self.directory.clone(), self.escrow_id.clone());
        Box::pin(async move {
            escrow(&d, &id)
                .await?
                .send(GetFinalState)
                .await
                .map_err(mailbox)
        })
    }

    fn catch_up(&self, _host: Address) -> LocalBoxFuture<'static, Result<(), StepError>> {
        let (d, id) = (self.directory.clone(), self.escrow_id.clone());
        Box::pin(async move {
            escrow(&d, &id)
                .await?
                .send(CatchUpAll)
                .await
                .map_err(mailbox)
        })
    }

    fn check_warm_key(
        &self,
        validator: Address,
        warm: Address,
    ) -> LocalBoxFuture<'static, Result<(), StepError>> {
        let (d, id) = (self.directory.clone(), self.escrow_id.clone());
        Box::pin(async move {
            escrow(&d, &id)
                .await?
                .send(CheckWarmSigner { validator, warm })
                .await
                .map_err(mailbox)
        })
    }

    fn charge_invalid_signature(
        &self,
        host: Address,
    ) -> LocalBoxFuture<'static, Result<(), StepError>> {
        let (d, id) = (self.directory.clone(), self.escrow_id.clone());
        Box::pin(async move {
            escrow(&d, &id)
                .await?
                .send(ChargeInvalidSignature { participant: host })
                .await
                .map_err(mailbox)
        })
    }
}
