//! The nonce picker, one part of the escrow actor (docs/protocol.md §6.2, docs/health.md §4): the races
//! waiting for a nonce, in arrival order, and the picker-hold timer.
//!
//! The next nonce's host is fixed (`nonce % N`). The first waiting race that has not tried that
//! host takes it. A nonce whose host is withheld by our choice (ejected, under repair) becomes a
//! diff without `MsgStartInference`; one whose repair gave up becomes a ghost inference. A nonce
//! every waiting race already tried waits `picker_hold_ms` for a new taker, then is withheld too.
//! During PoC in relaxed mode a request may go only to the preserved participants' hosts
//! ([`InferenceParams::allows`]): a nonce whose host no waiting race may use is passed over at
//! once (a diff without inference), and a race none of whose hosts is routable is answered
//! `NoPreservedHost`. A nonce whose host refuses connections is passed over too, but for its
//! probe, and while every host refuses the waiters are answered `HostsUnreachable`
//! (`reach/mod.rs`). A nonce whose host lacks more than `reach_background_catch_up_diffs` diffs
//! starts that host's background catch-up instead of a grant, and is then passed over (or
//! waited on, then refused `HostsCatchingUp`, when no other host can serve).
//! [`Picker::next_step`] says what to do with the next nonce; the actor carries it out.

use std::{collections::VecDeque, sync::Arc};

use tokio::sync::oneshot;

use super::{
    error::EscrowError,
    messages::{AttemptKind, InferenceParams, NonceGrant},
    nonce_room,
    reach::{NonceReach, Reachability},
    routing::Routing,
    session::Session,
};
use crate::{protocol::crypto::Address, protocol::state::Phase, stats::timers::Timer};

/// A race waiting for a nonce.
pub(super) struct Waiter {
    pub race_id: u64,
    pub params: Arc<InferenceParams>,
    pub exclude: Vec<Address>,
    pub kind: AttemptKind,
    pub reply: oneshot::Sender<Result<NonceGrant, EscrowError>>,
}

/// What to do with the next nonce.
pub(super) enum Step {
    /// Grant it to this waiter (the hold is over).
    Grant(Waiter),
    /// Its host's repair gave up: sequence a ghost inference for it.
    Ghost(Address),
    /// Its host is withheld: sequence a diff without inference.
    Withhold,
    /// Its host refuses connections and its probe is not due: a diff without inference.
    Unreachable,
    /// Its host is catching up in another attempt or a background sync: a diff without inference.
    CatchingUp,
    /// Its host lacks too many diffs for an attempt to carry: start its background catch-up,
    /// then ask again.
    CatchUpInBackground(Address),
    /// Its host is caught up in the background and no other host can serve: this many waiters
    /// were answered `HostsCatchingUp`; stop.
    RefusedCatchingUp(usize),
    /// Every host the escrow could use refuses and the gate's probe is not due: this many
    /// waiters were answered `HostsUnreachable` without a nonce.
    RefusedUnreachable(usize),
    /// Every waiter tried its host, or its host is catching up and no other host can stand in:
    /// arm the hold and stop (the end of the catch-up pumps again).
    Hold,
    /// No waiter may use its host (relaxed PoC): sequence a diff without inference at once.
    Pass,
    /// Nobody waits any more: cancel the hold and stop.
    Idle,
    /// Nothing can be handed out (waiters were answered, or the nonce has no host): stop.
    Stop,
}

/// See the module docs.
pub(super) struct Picker {
    /// Races waiting for a nonce, in arrival order.
    waiting: VecDeque<Waiter>,
    /// The picker-hold timer, while armed.
    hold: Option<Timer>,
    max_waiting: usize,
}

/// Why no new inference can start, if so. `open`: the inferences still unsettled, each of which
/// may need a diff of its own before the finalize round (`nonce_room::start_fits`).
pub(super) fn refusal(session: &Session, routing: &Routing, open: usize) -> Option<EscrowError> {
    let id = session.info().escrow_id.clone();
    if session.state().phase() != Phase::Active {
        return Some(EscrowError::NotActive(id));
    }
    let open = u64::try_from(open).unwrap_or(u64::MAX);
    if !nonce_room::start_fits(session.nonce(), open, session.info().last_active_nonce()) {
        return Some(EscrowError::NonceLimit(id));
    }
    if routing.none_routable() {
        return Some(EscrowError::NoRoutableHost(id));
    }
    None
}

impl Picker {
    pub(super) fn new(max_waiting: usize) -> Picker {
        Picker {
            waiting: VecDeque::new(),
            hold: None,
            max_waiting,
        }
    }

    /// Whether another race may wait (beyond: `Saturated`).
    pub(super) fn is_full(&self) -> bool {
        self.waiting.len() >= self.max_waiting
    }

    pub(super) fn push(&mut self, w: Waiter) {
        self.waiting.push_back(w);
    }

    /// A race went away before it was granted.
    pub(super) fn race_gone(&mut self, race_id: u64) {
        self.waiting.retain(|w| w.race_id != race_id);
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Drops waiters whose race stopped listening (start of a pump).
    pub(super) fn prune(&mut self) {
        self.waiting.retain(|w| !w.reply.is_closed());
    }

    /// Answers every waiter with `err` (the escrow stops).
    pub(super) fn fail_all(&mut self, err: &EscrowError) {
        for w in self.waiting.drain(..) {
            let _ = w.reply.send(Err(err.clone()));
        }
    }

    /// What to do with the next nonce (see [`Step`]).
    pub(super) fn next_step(
        &mut self,
        session: &Session,
        routing: &Routing,
        (reach, now): (&mut Reachability, i64),
        open: usize,
    ) -> Step {
        if self.waiting.is_empty() {
            return Step::Idle;
        }
        if let Some(err) = refusal(session, routing, open) {
            self.fail_all(&err);
            return Step::Stop;
        }
        let next = session.nonce().saturating_add(1);
        let Some(host) = session
            .info()
            .host_for_nonce(next)
            .map(|h| h.address.clone())
        else {
            return Step::Stop;
        };
        if routing.has_given_up(&host) {
            return Step::Ghost(host);
        }
        if routing.is_withheld(&host) {
            return Step::Withhold;
        }
        self.fail_exhausted(session, routing);
        let takes = |w: &Waiter| !w.exclude.contains(&host) && w.params.allows(&host);
        match self.waiting.iter().position(takes) {
            Some(i) => {
                let lacks = session.lacks(&host);
                if reach.is_far(lacks) && !reach.is_catching_up(&host) {
                    return Step::CatchUpInBackground(host);
                }
                let verdict = if reach.is_held_back(&host) {
                    reach.nonce(&host, &routing.routable_hosts(), now)
                } else {
                    NonceReach::Grant
                };
                match verdict {
                    NonceReach::Grant | NonceReach::Probe => match self.waiting.remove(i) {
                        Some(w) => Step::Grant(w),
                        None => Step::Stop,
                    },
                    NonceReach::Withhold => Step::Unreachable,
                    NonceReach::CatchingUp => Step::CatchingUp,
                    NonceReach::AwaitCatchUp => Step::Hold,
                    NonceReach::Refuse => {
                        let err = EscrowError::HostsUnreachable {
                            escrow: session.info().escrow_id.clone(),
                            refusing: reach.unreachable_count(),
                            cause: reach.cause(),
                            retry_after_s: reach.retry_after_s(now),
                        };
                        let n = self.waiting.len();
                        reach.refused_waiters(n);
                        self.fail_all(&err);
                        Step::RefusedUnreachable(n)
                    }
                    NonceReach::RefuseCatchingUp => {
                        let escrow = session.info().escrow_id.clone();
                        let err = EscrowError::hosts_catching_up(escrow, &host, lacks);
                        let n = self.waiting.len();
                        reach.refused_waiters(n);
                        self.fail_all(&err);
                        Step::RefusedCatchingUp(n)
                    }
                }
            }
            None if self.waiting.iter().all(|w| !w.params.allows(&host)) => Step::Pass,
            // Every waiter tried this host, and it is catching up while another host could
            // serve: no later waiter would be granted it either, so it passes over at once
            // instead of after a hold (seed long-1: retries from the catching host were served
            // one per `picker_hold_ms`).
            None if reach.pass_over_catching(&host, &routing.routable_hosts(), now) => {
                Step::CatchingUp
            }
            None => Step::Hold,
        }
    }

    /// Races that tried every routable host they may use get a clear error instead of waiting
    /// forever.
    fn fail_exhausted(&mut self, session: &Session, routing: &Routing) {
        let routable = routing.routable_hosts();
        let id = session.info().escrow_id.clone();
        let (exhausted, keep): (Vec<_>, Vec<_>) = self.waiting.drain(..).partition(|w| {
            routable
                .iter()
                .filter(|h| w.params.allows(h))
                .all(|h| w.exclude.contains(h))
        });
        self.waiting = keep.into();
        for w in exhausted {
            let err = if routable.iter().any(|h| w.params.allows(h)) {
                EscrowError::AllHostsTried(id.clone())
            } else {
                EscrowError::NoPreservedHost(id.clone())
            };
            let _ = w.reply.send(Err(err));
        }
    }

    /// At the end of the hold: whether the next nonce is still blocked (waiters, all of whom
    /// tried its host), so it must be withheld.
    pub(super) fn still_blocked(&self, session: &Session) -> bool {
        let next = session.nonce().saturating_add(1);
        let host = session
            .info()
            .host_for_nonce(next)
            .map(|h| h.address.clone());
        host.is_some_and(|h| {
            !self.waiting.is_empty()
                && self
                    .waiting
                    .iter()
                    .all(|w| w.exclude.contains(&h) || !w.params.allows(&h))
        })
    }

    pub(super) fn hold_armed(&self) -> bool {
        self.hold.is_some()
    }

    pub(super) fn set_hold(&mut self, timer: Timer) {
        self.hold = Some(timer);
    }

    /// The armed hold, to cancel (or `None` when it fired).
    pub(super) fn take_hold(&mut self) -> Option<Timer> {
        self.hold.take()
    }
}
