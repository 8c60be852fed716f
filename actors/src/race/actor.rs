//! `RaceActor`: one per client request. Asks its escrow for nonces, runs each attempt as a task
//! on this arbiter (awc is `!Send`, so races live on the HTTP worker thread that accepted the
//! request), crowns by the liveness rule (crown.rs), cancels the losers, starts the next attempt
//! when one fails before content (up to `max_attempts`, unless the escrow says the fault is
//! shared), hedges a slow primary when its hedge comes due, and pairs a Suspect/Probation primary
//! with a Healthy host's attempt.
//!
//! - **Owns**: the attempts of this request and the reply to the HTTP edge.
//! - **Survives a restart**: nothing; a race is never restarted or respawned. If it dies, its
//!   client gets an error and its escrow still settles every nonce it was given.
//! - **Timers** (named as in its stats): `hedge`, the primary's hedge timer; `crown_hold`, the
//!   hold of a Suspect/Probation content (`suspect_hold_ms`); and the 1 s `client_check` interval.
//! - **Who holds its `Addr`**: its own attempt tasks only (counted
//!   [`crate::stats::TrackedAddr`]s). Listed in the actor registry as `race` `<race id>` with its
//!   escrow and request id.
//! - **Reports**: when it stops, its nonces and attempts ([`RaceReport`]) go to `spec.report`
//!   (the HTTP edge's request accounting). Handlers are in `handlers.rs`.

use std::{collections::BTreeMap, time::Duration};

use actix::prelude::*;
use slog::{info, o, warn, Logger};
use tokio::sync::{oneshot, watch};

use super::{
    api::{RaceError, RaceReply, RaceReport, RaceSpec, RaceStart},
    attempt::{AttemptTask, CancelSignal},
    errors::{escrow_error, escrow_gone, no_answer},
    messages::{Crown, RaceShape},
};
use crate::{
    directory::{RaceEnded, RaceStarted},
    escrow::{
        error::EscrowError,
        messages::{AttemptKind, HedgeRequest, NonceGrant, RaceGone, RequestNonce},
    },
    outcome::AttemptEnd,
    policy::health::Preference,
    protocol::crypto::Address,
    stats::{
        timers::{self, Timer},
        Kind, StatsSlot, TrackedActor,
    },
};

const CLIENT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

pub(super) struct AttemptSlot {
    pub nonce: u64,
    pub host: Address,
    pub ended: bool,
    pub preference: Preference,
    pub sent_ms: i64,
    pub receipt: bool,
    pub first_content_ms: Option<i64>,
    /// Its grant carried catch-up chunks (the host was behind; hedged at once).
    pub catching_up: bool,
    pub kind: &'static str,
    /// Tells this attempt's task it lost the race or must stop (see [`CancelSignal`]).
    pub cancel: watch::Sender<CancelSignal>,
    /// How the attempt ended and when (unix ms), once its task reported.
    pub end: Option<(AttemptEnd, i64)>,
}

/// A nonce granted to the race that no attempt used (client gone, or a hedge after the winner).
pub(super) struct UnusedGrant {
    pub nonce: u64,
    pub host: Address,
    pub kind: &'static str,
}

/// The race actor (see the module docs).
pub struct RaceActor {
    pub(super) spec: RaceSpec,
    pub(super) log: Logger,
    pub(super) reply: Option<oneshot::Sender<Result<RaceStart, RaceError>>>,
    pub(super) attempts: Vec<AttemptSlot>,
    pub(super) tried: Vec<Address>,
    /// Hosts a retry may come back to once after they paused before any work (`handlers.rs`).
    pub(super) came_back: Vec<Address>,
    pub(super) winner: Option<usize>,
    pub(super) requesting: usize,
    /// Hedge and pair requests in flight: the client's answer never waits for them; the actor
    /// stops only after they came back (`maybe_finish`).
    pub(super) requesting_extra: usize,
    pub(super) last_error: Option<RaceError>,
    /// Attempts with content waiting for the crown decision.
    pub(super) pending_crowns: BTreeMap<usize, oneshot::Sender<Crown>>,
    pub(super) hold_timer: Option<Timer>,
    pub(super) hedge_timer: Option<Timer>,
    paired: bool,
    /// When the race started (unix ms): attempt offsets are relative to it.
    pub(super) started_ms: i64,
    pub(super) unused: Vec<UnusedGrant>,
    /// How the primary's grant shaped the race (debug view).
    pub(super) shape: Option<RaceShape>,
    pub(super) stats: StatsSlot,
}

impl RaceActor {
    /// Starts a race on the current arbiter and returns where its answer will arrive.
    pub fn start_race(spec: RaceSpec) -> RaceReply {
        let (tx, rx) = oneshot::channel();
        let log = spec.log.new(o!("request" => spec.params.request_id.clone(),
            "escrow" => spec.escrow_id.clone()));
        let labels = [
            ("escrow", spec.escrow_id.clone()),
            ("request_id", spec.params.request_id.clone()),
        ]
        .into_iter()
        .collect();
        let stats =
            spec.actors
                .register_with(Kind::Race, spec.race_id.to_string(), labels, &spec.clock);
        let started_ms = spec.clock.now_ms();
        RaceActor {
            spec,
            log,
            reply: Some(tx),
            attempts: Vec::new(),
            tried: Vec::new(),
            came_back: Vec::new(),
            winner: None,
            requesting: 0,
            requesting_extra: 0,
            last_error: None,
            pending_crowns: BTreeMap::new(),
            hold_timer: None,
            hedge_timer: None,
            paired: false,
            started_ms,
            unused: Vec::new(),
            shape: None,
            stats,
        }
        .start();
        rx
    }

    pub(super) fn now(&self) -> i64 {
        self.spec.clock.now_ms()
    }

    pub(super) fn request_attempt(&mut self, kind: AttemptKind, ctx: &mut Context<Self>) {
        if self.attempts.len() + self.requesting >= self.spec.limits.max_attempts {
            return;
        }
        let extra = matches!(kind, AttemptKind::Hedge(_) | AttemptKind::Pair);
        if extra {
            self.requesting_extra += 1;
        } else {
            self.requesting += 1;
        }
        let msg = RequestNonce {
            race_id: self.spec.race_id,
            params: self.spec.params.clone(),
            exclude: self.tried.clone(),
            kind: kind.clone(),
        };
        let label = match kind {
            AttemptKind::Primary => "primary",
            AttemptKind::Retry => "retry",
            AttemptKind::Hedge(_) => "hedge",
            AttemptKind::Pair => "pair",
        };
        let fut = self
            .spec
            .escrow
            .send(msg)
            .into_actor(self)
            .map(move |res, act, ctx| {
                if extra {
                    act.requesting_extra = act.requesting_extra.saturating_sub(1);
                } else {
                    act.requesting = act.requesting.saturating_sub(1);
                }
                match res {
                    Ok(Ok(grant)) => act.launch(grant, label, ctx),
                    Ok(Err(EscrowError::HedgeWait(until_ms))) => act.arm_hedge(until_ms, ctx),
                    Ok(Err(_)) if extra => {}
                    Ok(Err(e)) => act.no_more_attempts(escrow_error(&e), ctx),
                    Err(_) => act.no_more_attempts(escrow_gone(), ctx),
                }
                if extra {
                    act.maybe_finish(ctx);
                }
            });
        ctx.spawn(fut);
    }

    fn launch(&mut self, grant: NonceGrant, kind: &'static str, ctx: &mut Context<Self>) {
        let late_extra = kind != "primary" && kind != "retry" && self.winner.is_some();
        if (self.reply.is_none() && self.winner.is_none()) || late_extra {
            // The client left, or a hedge/pair arrived after the winner: the attempt is not
            // started; the escrow settles the unclaimed nonce.
            self.spec
                .escrow
                .do_send(crate::escrow::messages::GrantUnused { nonce: grant.nonce });
            self.unused.push(UnusedGrant {
                nonce: grant.nonce,
                host: grant.host,
                kind,
            });
            return;
        }
        let idx = self.attempts.len();
        info!(self.log, "attempt started"; "stage" => "attempt_started", "nonce" => grant.nonce,
            "host" => grant.host.short(), "attempt" => idx, "kind" => kind,
            "preference" => format!("{:?}", grant.preference));
        self.tried.push(grant.host.clone());
        let (cancel, cancelled) = watch::channel(CancelSignal::Running);
        self.attempts.push(AttemptSlot {
            nonce: grant.nonce,
            host: grant.host.clone(),
            ended: false,
            preference: grant.preference,
            sent_ms: self.now(),
            receipt: false,
            first_content_ms: None,
            catching_up: !grant.prelude.is_empty(),
            kind,
            cancel,
            end: None,
        });
        if idx == 0 {
            let doubtful = grant.preference != Preference::Healthy;
            let pair = doubtful && grant.healthy_available && !self.paired;
            let hedge_in_ms = grant.hedge_due_ms.map(|d| d.saturating_sub(self.now()));
            let decision = if pair {
                "pair_with_healthy"
            } else if hedge_in_ms.is_some_and(|ms| ms <= 0) {
                "hedge_now"
            } else {
                "primary_then_hedge_if_slow"
            };
            self.shape = Some(RaceShape {
                decision,
                hedge_due_ms: grant.hedge_due_ms,
            });
            info!(self.log, "race shape decided"; "stage" => "decision_made", "nonce" => grant.nonce,
                "host" => grant.host.short(), "hedge_in_ms" => hedge_in_ms, "decision" => decision);
            if let Some(due) = grant.hedge_due_ms {
                self.arm_hedge(due, ctx);
            }
            if pair {
                self.paired = true;
                self.request_attempt(AttemptKind::Pair, ctx);
            }
        }
        let task = AttemptTask {
            idx,
            grant,
            race: self.tracked_address(ctx),
            escrow: self.spec.escrow.clone(),
            clock: self.spec.clock.clone(),
            limits: self.spec.limits,
            input_bytes: u64::try_from(self.spec.params.body.len()).unwrap_or(u64::MAX),
            stream: self.spec.params.stream,
            log: self.log.clone(),
            cancel: cancelled,
            stream_error: self.spec.stream_error,
            metrics: self.spec.metrics.clone(),
        };
        actix::spawn(task.run());
        if let Some(dispatched) = self.spec.dispatched.take() {
            dispatched();
        }
    }

    /// Arms (or re-arms) the primary's hedge timer.
    pub(super) fn arm_hedge(&mut self, due_ms: i64, ctx: &mut Context<Self>) {
        if let Some(t) = self.hedge_timer.take() {
            t.cancel(&self.stats, ctx);
        }
        let delay =
            Duration::from_millis(u64::try_from(due_ms.saturating_sub(self.now())).unwrap_or(0));
        let timer = timers::run_later(&self.stats, ctx, "hedge", delay, Self::hedge_due);
        self.hedge_timer = Some(timer);
    }

    /// The primary's hedge timer fired: ask the escrow for a hedge if the primary is still slow.
    fn hedge_due(&mut self, ctx: &mut Context<Self>) {
        self.hedge_timer = None;
        let Some(primary) = self.attempts.first() else {
            return;
        };
        if self.winner.is_some()
            || primary.ended
            || primary.first_content_ms.is_some()
            || self.reply.is_none()
        {
            return;
        }
        let req = HedgeRequest {
            primary: primary.host.clone(),
            sent_ms: primary.sent_ms,
            got_receipt: primary.receipt,
            got_first_content: false,
            attempts: u32::try_from(self.attempts.len()).unwrap_or(u32::MAX),
            catching_up: primary.catching_up,
        };
        self.request_attempt(AttemptKind::Hedge(req), ctx);
    }

    /// No further attempt will run: fail the client if nothing was delivered.
    fn no_more_attempts(&mut self, err: RaceError, ctx: &mut Context<Self>) {
        self.last_error = Some(err);
        self.maybe_finish(ctx);
    }

    /// Stops every running attempt except `keep`. Without a winner (`keep = None`: client gone,
    /// shared fault) they stop at once. Once a winner is crowned, losers with a receipt and
    /// Suspect/Probation ones are left to drain (see `crown.rs`); the others are told they lost.
    pub(super) fn cancel_all(&self, keep: Option<usize>) {
        for (i, a) in self.attempts.iter().enumerate() {
            if Some(i) == keep || a.ended {
                continue;
            }
            if keep.is_none() {
                let _ = a.cancel.send(CancelSignal::Stop);
            } else if super::crown::loser_drains(a) {
                let why = if a.receipt { "receipt" } else { "doubtful" };
                info!(self.log, "loser left to drain to its finish"; "stage" => "loser_draining",
                    "nonce" => a.nonce, "host" => a.host.short(), "why" => why);
            } else {
                // The attempt drains anyway if its receipt arrived meanwhile (attempt.rs).
                let _ = a.cancel.send(CancelSignal::LostRace);
            }
        }
    }

    pub(super) fn running(&self) -> usize {
        self.attempts.iter().filter(|a| !a.ended).count()
    }

    /// Once no attempt runs and no primary/retry nonce is requested: the client gets its error
    /// if it has no answer, and the race stops when its hedge and pair requests came back too —
    /// a grant answered after the race stopped would reach nobody, and its nonce would stay in
    /// flight in the escrow's book for good (seed 12: hedges granted after the primary won,
    /// never started, never timed out, Pending on every host). Such a grant is handed back as
    /// unused (`launch`).
    pub(super) fn maybe_finish(&mut self, ctx: &mut Context<Self>) {
        if self.running() > 0 || self.requesting > 0 {
            return;
        }
        if let Some(reply) = self.reply.take() {
            let err = self.last_error.clone().unwrap_or_else(no_answer);
            warn!(self.log, "request failed"; "stage" => "request_failed", "kind" => ?err.kind,
                "error" => &err.message);
            let _ = reply.send(Err(err));
        }
        if self.requesting_extra == 0 {
            ctx.stop();
        }
    }
}

impl Actor for RaceActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.offer_description(ctx);
        self.spec.directory.do_send(RaceStarted {
            race_id: self.spec.race_id,
            escrow_id: self.spec.escrow_id.clone(),
            request_id: self.spec.params.request_id.clone(),
        });
        let stats = self.stats.clone();
        let check = CLIENT_CHECK_INTERVAL;
        let _ = timers::run_interval(&stats, ctx, "client_check", check, |act, ctx| {
            if act.reply.as_ref().is_some_and(|r| r.is_closed()) {
                act.reply = None;
                act.cancel_all(None);
                act.spec.escrow.do_send(RaceGone {
                    race_id: act.spec.race_id,
                });
                act.maybe_finish(ctx);
            }
        });
        self.request_attempt(AttemptKind::Primary, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.cancel_all(self.winner);
        self.spec.directory.do_send(RaceEnded {
            race_id: self.spec.race_id,
            escrow_id: self.spec.escrow_id.clone(),
        });
        if let Some(tx) = self.spec.report.take() {
            let report: RaceReport = self.report();
            let _ = tx.send(report);
        }
    }
}
