//! Resends, one concern of the escrow actor: a nonce sent again from what its host holds after
//! the host answered a nonce gap (`ResendGrant`, optimistic catch-up's recovery). While another
//! attempt carries the host's catch-up, a resend that needs a catch-up too is refused, or, when
//! no other host could take its request, parked here until that catch-up is over and then
//! built from what the host holds by then (`actor/reaching.rs` decides which).
//!
//! Owns the parked resends (each with its reply channel). Nothing survives a restart: a stopped
//! actor drops them and their races see the escrow gone. Timers: none (a catch-up ends with
//! its attempt's receipt or end, and that releases them).

use actix::prelude::*;
use slog::info;
use tokio::sync::oneshot;

use super::{reaching::ResendReach, EscrowActor};
use crate::{
    escrow::{
        error::EscrowError,
        messages::{Resend, ResendGrant},
    },
    protocol::crypto::Address,
};

/// A resend waiting for its host's catch-up in another attempt.
pub(super) struct ParkedResend {
    msg: ResendGrant,
    reply: oneshot::Sender<Result<Resend, EscrowError>>,
}

impl Handler<ResendGrant> for EscrowActor {
    type Result = ResponseFuture<Result<Resend, EscrowError>>;

    fn handle(&mut self, msg: ResendGrant, ctx: &mut Self::Context) -> Self::Result {
        match self.reach_resend(&msg.host, msg.nonce, msg.holds, ctx) {
            Err(e) => Box::pin(async move { Err(e) }),
            Ok(ResendReach::Send) => {
                let built = self.build_resend(&msg, msg.holds);
                Box::pin(async move { built })
            }
            Ok(ResendReach::Wait) => {
                let (reply, answer) = oneshot::channel();
                self.parked_resends.push(ParkedResend { msg, reply });
                Box::pin(async move {
                    answer.await.unwrap_or_else(|_| {
                        Err(EscrowError::Protocol(
                            "the escrow stopped while a resend waited for a catch-up".to_owned(),
                        ))
                    })
                })
            }
        }
    }
}

impl EscrowActor {
    /// The bodies of a resend of `msg.nonce` from `holds`.
    fn build_resend(&mut self, msg: &ResendGrant, holds: u64) -> Result<Resend, EscrowError> {
        let payload = self
            .book
            .entry(msg.nonce)
            .filter(|e| e.host == msg.host)
            .and_then(|e| e.payload.as_ref())
            .ok_or_else(|| {
                EscrowError::Protocol(format!("nonce {} is not in flight to that host", msg.nonce))
            })?;
        let (prelude, request) =
            self.durable
                .resend(&self.session, &self.deps, (msg.nonce, holds), payload)?;
        self.reach_resend_carries(&msg.host, msg.nonce, prelude.len());
        info!(self.deps.log, "nonce sent again from what its host holds"; "stage" => "gap_resend",
            "nonce" => msg.nonce, "host" => msg.host.short(), "holds" => holds,
            "chunks" => prelude.len());
        Ok(Resend { prelude, request })
    }

    /// `host`'s catch-up is over: its parked resends are built from what it holds now (the
    /// catch-up's diffs need not be sent again) and answered. One that still carries a catch-up
    /// becomes the host's catch-up, and the rest wait for it in turn.
    pub(super) fn release_resends(&mut self, host: &Address) {
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked_resends)
            .into_iter()
            .partition(|p| p.msg.host == *host);
        self.parked_resends = others;
        let mut mine = mine.into_iter();
        for p in mine.by_ref() {
            if p.reply.is_closed() {
                continue;
            }
            let sync = self.session.host_sync(host);
            let holds = p.msg.holds.max(sync).min(p.msg.nonce.saturating_sub(1));
            let built = self.build_resend(&p.msg, holds);
            let _ = p.reply.send(built);
            if self.reach.is_catching_up(host) {
                break;
            }
        }
        self.parked_resends.extend(mine);
    }
}
