//! `RaceActor`: one per client request. Asks its escrow for nonces, runs each attempt as a task
//! on this arbiter (awc is `!Send`, so races live on the HTTP worker thread that accepted the
//! request), crowns the first attempt that produces content, cancels the losers, and starts the
//! next attempt when one fails before content (up to `max_attempts`, and only when the escrow's
//! verdict says another host may help).
//!
//! - **Owns**: the attempts of this request and the reply to the HTTP edge.
//! - **Survives a restart**: nothing; a race is never restarted or respawned. If it dies, its
//!   client gets an error and its escrow still settles every nonce it was given.
//! - **Timers**: a 1 s client-gone check while no byte has been sent.
//! - **Who holds its `Addr`**: its own attempt tasks only.

use std::time::Duration;

use actix::prelude::*;
use slog::{info, o, warn, Logger};
use tokio::sync::{mpsc, oneshot, watch};

use super::{
    api::{RaceError, RaceReply, RaceSpec, RaceStart, CLIENT_CHANNEL_CAPACITY},
    attempt::AttemptTask,
    messages::{AttemptFinished, Crown, Delivered, FirstContent, GetRace, RaceSnapshot},
};
use crate::{
    directory::{RaceEnded, RaceStarted},
    escrow::{
        attempt::AttemptEnd,
        error::EscrowError,
        messages::{RaceGone, RequestNonce},
    },
    protocol::crypto::Address,
};

const CLIENT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

struct AttemptSlot {
    nonce: u64,
    host: Address,
    ended: bool,
    /// Tells this attempt's task to stop (it then reports `Cancelled`).
    cancel: watch::Sender<bool>,
}

/// The race actor (see the module docs).
pub struct RaceActor {
    spec: RaceSpec,
    log: Logger,
    reply: Option<oneshot::Sender<Result<RaceStart, RaceError>>>,
    attempts: Vec<AttemptSlot>,
    tried: Vec<Address>,
    winner: Option<usize>,
    requesting: bool,
    last_error: Option<RaceError>,
}

impl RaceActor {
    /// Starts a race on the current arbiter and returns where its answer will arrive.
    pub fn start_race(spec: RaceSpec) -> RaceReply {
        let (tx, rx) = oneshot::channel();
        let log = spec.log.new(o!("request" => spec.params.request_id.clone(),
            "escrow" => spec.escrow_id.clone()));
        RaceActor {
            spec,
            log,
            reply: Some(tx),
            attempts: Vec::new(),
            tried: Vec::new(),
            winner: None,
            requesting: false,
            last_error: None,
        }
        .start();
        rx
    }

    fn request_attempt(&mut self, ctx: &mut Context<Self>) {
        self.requesting = true;
        let msg = RequestNonce {
            race_id: self.spec.race_id,
            params: self.spec.params.clone(),
            exclude: self.tried.clone(),
        };
        let fut = self
            .spec
            .escrow
            .send(msg)
            .into_actor(self)
            .map(|res, act, ctx| {
                act.requesting = false;
                match res {
                    Ok(Ok(grant)) => act.launch(grant, ctx),
                    Ok(Err(e)) => act.no_more_attempts(escrow_error(&e), ctx),
                    Err(_) => act.no_more_attempts(
                        RaceError {
                            status: 503,
                            kind: "service_unavailable".into(),
                            message: "the escrow is restarting; retry shortly".into(),
                            retry_after_s: Some(1),
                        },
                        ctx,
                    ),
                }
            });
        ctx.spawn(fut);
    }

    fn launch(&mut self, grant: crate::escrow::messages::NonceGrant, ctx: &mut Context<Self>) {
        let idx = self.attempts.len();
        info!(self.log, "attempt started"; "stage" => "attempt_started", "nonce" => grant.nonce,
            "host" => grant.host.short(), "attempt" => idx);
        self.tried.push(grant.host.clone());
        let (cancel, cancelled) = watch::channel(false);
        self.attempts.push(AttemptSlot {
            nonce: grant.nonce,
            host: grant.host.clone(),
            ended: false,
            cancel,
        });
        let task = AttemptTask {
            idx,
            grant,
            race: ctx.address(),
            escrow: self.spec.escrow.clone(),
            clock: self.spec.clock.clone(),
            limits: self.spec.limits,
            input_bytes: u64::try_from(self.spec.params.body.len()).unwrap_or(u64::MAX),
            cancel: cancelled,
        };
        actix::spawn(task.run());
    }

    /// No further attempt will run: fail the client if nothing was delivered.
    fn no_more_attempts(&mut self, err: RaceError, ctx: &mut Context<Self>) {
        self.last_error = Some(err);
        self.maybe_finish(ctx);
    }

    /// Cancels every running attempt except `keep`.
    fn cancel_all(&self, keep: Option<usize>) {
        for (i, a) in self.attempts.iter().enumerate() {
            if Some(i) != keep && !a.ended {
                let _ = a.cancel.send(true);
            }
        }
    }

    fn running(&self) -> usize {
        self.attempts.iter().filter(|a| !a.ended).count()
    }

    fn maybe_finish(&mut self, ctx: &mut Context<Self>) {
        if self.running() > 0 || self.requesting {
            return;
        }
        if let Some(reply) = self.reply.take() {
            let err = self.last_error.clone().unwrap_or_else(|| RaceError {
                status: 502,
                kind: "upstream_error".into(),
                message: "no host produced an answer".into(),
                retry_after_s: None,
            });
            warn!(self.log, "request failed"; "stage" => "request_failed", "status" => err.status,
                "error" => &err.message);
            let _ = reply.send(Err(err));
        }
        ctx.stop();
    }
}

impl Actor for RaceActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.spec.directory.do_send(RaceStarted {
            race_id: self.spec.race_id,
            escrow_id: self.spec.escrow_id.clone(),
            request_id: self.spec.params.request_id.clone(),
        });
        ctx.run_interval(CLIENT_CHECK_INTERVAL, |act, ctx| {
            if act.reply.as_ref().is_some_and(|r| r.is_closed()) {
                act.reply = None;
                act.cancel_all(None);
                act.spec.escrow.do_send(RaceGone {
                    race_id: act.spec.race_id,
                });
                act.maybe_finish(ctx);
            }
        });
        self.request_attempt(ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.cancel_all(self.winner);
        self.spec.directory.do_send(RaceEnded {
            race_id: self.spec.race_id,
            escrow_id: self.spec.escrow_id.clone(),
        });
    }
}

impl Handler<FirstContent> for RaceActor {
    type Result = MessageResult<FirstContent>;

    fn handle(&mut self, msg: FirstContent, _: &mut Self::Context) -> Self::Result {
        if self.winner.is_some() {
            return MessageResult(Crown::Lose);
        }
        let Some(reply) = self.reply.take() else {
            return MessageResult(Crown::Lose);
        };
        self.winner = Some(msg.idx);
        if let Some(a) = self.attempts.get(msg.idx) {
            info!(self.log, "winner selected"; "stage" => "winner_selected", "nonce" => a.nonce,
                "host" => a.host.short());
        }
        // Losers stop at once; they report `Cancelled`.
        self.cancel_all(Some(msg.idx));
        if self.spec.params.stream {
            let (tx, rx) = mpsc::channel(CLIENT_CHANNEL_CAPACITY);
            if reply.send(Ok(RaceStart::Stream(rx))).is_err() {
                return MessageResult(Crown::Lose);
            }
            MessageResult(Crown::StreamTo(tx))
        } else {
            self.reply = Some(reply);
            MessageResult(Crown::Collect)
        }
    }
}

impl Handler<Delivered> for RaceActor {
    type Result = ();

    fn handle(&mut self, msg: Delivered, _: &mut Self::Context) {
        if self.winner == Some(msg.idx) {
            if let Some(reply) = self.reply.take() {
                let _ = reply.send(Ok(RaceStart::Whole(msg.body)));
            }
        }
    }
}

impl Handler<AttemptFinished> for RaceActor {
    type Result = ();

    fn handle(&mut self, msg: AttemptFinished, ctx: &mut Self::Context) {
        if let Some(a) = self.attempts.get_mut(msg.idx) {
            a.ended = true;
        }
        if msg.crowned || self.winner.is_some() {
            if msg.crowned && self.reply.is_some() {
                // A non-streaming winner ended without delivering: fall through to an error.
                self.last_error = Some(end_error(&msg.end, None));
            }
            self.maybe_finish(ctx);
            return;
        }
        self.last_error = Some(end_error(&msg.end, msg.verdict.shared_fault.clone()));
        let client_waiting = self.reply.as_ref().is_some_and(|r| !r.is_closed());
        let may_retry = msg.verdict.retry && msg.verdict.shared_fault.is_none();
        if client_waiting && may_retry && self.attempts.len() < self.spec.limits.max_attempts {
            info!(self.log, "attempt failed; trying the next host"; "stage" => "attempt_retry",
                "host" => msg.host.short());
            self.request_attempt(ctx);
        } else {
            self.maybe_finish(ctx);
        }
    }
}

impl Handler<GetRace> for RaceActor {
    type Result = MessageResult<GetRace>;

    fn handle(&mut self, _: GetRace, _: &mut Self::Context) -> Self::Result {
        MessageResult(RaceSnapshot {
            race_id: self.spec.race_id,
            escrow_id: self.spec.escrow_id.clone(),
            request_id: self.spec.params.request_id.clone(),
            attempts: self
                .attempts
                .iter()
                .map(|a| {
                    (
                        a.nonce,
                        a.host.to_string(),
                        if a.ended { "ended" } else { "running" }.into(),
                    )
                })
                .collect(),
            winner: self.winner,
        })
    }
}

/// The client-facing error of an escrow refusal.
fn escrow_error(e: &EscrowError) -> RaceError {
    let (status, kind, retry) = match e {
        EscrowError::Saturated(_) => (429, "rate_limit_exceeded", Some(1)),
        EscrowError::AllHostsTried(_) | EscrowError::NoRoutableHost(_) => {
            (502, "upstream_error", None)
        }
        EscrowError::NotActive(_) | EscrowError::NonceLimit(_) | EscrowError::ShuttingDown(_) => {
            (503, "service_unavailable", Some(5))
        }
        EscrowError::Store(_) | EscrowError::Protocol(_) => (500, "internal_error", None),
    };
    RaceError {
        status,
        kind: kind.into(),
        message: e.to_string(),
        retry_after_s: retry,
    }
}

/// The client-facing error after the last attempt failed.
fn end_error(end: &AttemptEnd, shared: Option<String>) -> RaceError {
    if let Some(message) = shared {
        return RaceError {
            status: 502,
            kind: "upstream_error".into(),
            message,
            retry_after_s: None,
        };
    }
    let (status, message) = match end {
        AttemptEnd::Host(e) => (
            if e.retry_after().is_some() { 503 } else { 502 },
            format!("host failed: {e}"),
        ),
        AttemptEnd::Stalled => (
            504,
            "the host stopped sending before the answer was complete".into(),
        ),
        AttemptEnd::EmptyStream => (502, "the host returned an empty answer".into()),
        AttemptEnd::ErrorEvent { status, message } => (
            status.filter(|s| (400..600).contains(s)).unwrap_or(502),
            message.clone(),
        ),
        AttemptEnd::ReceiptRejected(e) => {
            (502, format!("the host's response failed verification: {e}"))
        }
        AttemptEnd::Cancelled | AttemptEnd::ClientGone => (499, "request cancelled".into()),
        AttemptEnd::Completed => (502, "the answer could not be delivered".into()),
    };
    let kind = if status == 504 {
        "timeout"
    } else if status < 500 {
        "invalid_request_error"
    } else {
        "upstream_error"
    };
    let retry_after_s = match end {
        AttemptEnd::Host(e) => e.retry_after().map(|d| d.as_secs().max(1)),
        _ => None,
    };
    RaceError {
        status,
        kind: kind.into(),
        message,
        retry_after_s,
    }
}
