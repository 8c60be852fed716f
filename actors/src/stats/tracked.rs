//! Counted message delivery: [`Tracked<M>`] wraps a message with a ticket, [`TrackedAddr`] and
//! [`TrackedRecipient`] send only tracked messages, and [`tracked_actor!`] gives an actor a
//! `Handler<Tracked<M>>` for every `M` it handles (a blanket impl over the actor type would break
//! the orphan rules, hence one macro call per actor type).
//!
//! The ticket counts a message in when it is created (at the send) and out when it is dropped:
//! by the handler (which also counts it handled), by the mailbox when its requester gave up
//! (actix then skips the handler), by a failed `try_send`, or with a mailbox that closed. So the
//! mailbox depth never drifts.

use std::{fmt, sync::Arc};

use actix::{
    dev::{MessageResponse, OneshotSender, RecipientRequest, Request, ToEnvelope},
    prelude::*,
};

use super::ActorStats;

/// Counts one message in at creation and out when dropped.
struct Ticket(Arc<ActorStats>);

impl Ticket {
    fn issue(stats: &Arc<ActorStats>) -> Ticket {
        stats.note_enqueued();
        Ticket(stats.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.note_dequeued();
    }
}

/// A message on its way through a counted mailbox (see the module docs).
pub struct Tracked<M> {
    msg: M,
    ticket: Ticket,
}

impl<M: Message> Message for Tracked<M> {
    type Result = M::Result;
}

impl<M> Tracked<M> {
    fn new(msg: M, stats: &Arc<ActorStats>) -> Tracked<M> {
        Tracked {
            msg,
            ticket: Ticket::issue(stats),
        }
    }

    /// The handler takes the message: it leaves the mailbox and counts as handled.
    pub fn open(self) -> M {
        let Tracked { msg, ticket } = self;
        ticket.0.note_handled();
        msg
    }

    /// The message was not delivered (it leaves the count without being handled).
    fn undelivered(self) -> M {
        self.msg
    }
}

fn untrack<M>(e: SendError<Tracked<M>>) -> SendError<M> {
    match e {
        SendError::Full(t) => SendError::Full(t.undelivered()),
        SendError::Closed(t) => SendError::Closed(t.undelivered()),
    }
}

/// The response of `Handler<Tracked<M>>`: `M`'s own response (the result types are equal).
pub struct TrackedResponse<A, M>(pub <A as Handler<M>>::Result)
where
    A: Actor + Handler<M>,
    M: Message;

impl<A, M> MessageResponse<A, Tracked<M>> for TrackedResponse<A, M>
where
    A: Actor + Handler<M>,
    M: Message,
{
    fn handle(self, ctx: &mut A::Context, tx: Option<OneshotSender<M::Result>>) {
        <<A as Handler<M>>::Result as MessageResponse<A, M>>::handle(self.0, ctx, tx);
    }
}

/// Makes an actor type tracked: [`super::TrackedActor`] (its stats live in a field named
/// `stats`) and `Handler<Tracked<M>>` for every `M` it handles.
macro_rules! tracked_actor {
    ($actor:ty) => {
        impl $crate::stats::TrackedActor for $actor {
            fn stats(&self) -> &::std::sync::Arc<$crate::stats::ActorStats> {
                &self.stats
            }
        }

        impl<M> ::actix::Handler<$crate::stats::Tracked<M>> for $actor
        where
            M: ::actix::Message + 'static,
            $actor: ::actix::Handler<M>,
        {
            type Result = $crate::stats::TrackedResponse<$actor, M>;

            fn handle(
                &mut self,
                msg: $crate::stats::Tracked<M>,
                ctx: &mut <$actor as ::actix::Actor>::Context,
            ) -> Self::Result {
                $crate::stats::TrackedResponse(<$actor as ::actix::Handler<M>>::handle(
                    self,
                    msg.open(),
                    ctx,
                ))
            }
        }
    };
}
pub(crate) use tracked_actor;

/// An actor's address that counts what it sends (same API as `Addr`).
pub struct TrackedAddr<A: Actor> {
    addr: Addr<A>,
    stats: Arc<ActorStats>,
}

impl<A: Actor> Clone for TrackedAddr<A> {
    fn clone(&self) -> Self {
        TrackedAddr {
            addr: self.addr.clone(),
            stats: self.stats.clone(),
        }
    }
}

impl<A: Actor> fmt::Debug for TrackedAddr<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackedAddr")
            .field("kind", &self.stats.kind())
            .field("id", &self.stats.id())
            .finish()
    }
}

impl<A: Actor> TrackedAddr<A> {
    /// `addr`, counted in `stats` (which must be the actor's own).
    pub fn new(addr: Addr<A>, stats: Arc<ActorStats>) -> TrackedAddr<A> {
        TrackedAddr { addr, stats }
    }

    /// The actor is running (its mailbox is open).
    pub fn connected(&self) -> bool {
        self.addr.connected()
    }

    /// The actor's stats.
    pub fn stats(&self) -> &Arc<ActorStats> {
        &self.stats
    }

    /// `Addr::send`, counted.
    pub fn send<M>(&self, msg: M) -> Request<A, Tracked<M>>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<Tracked<M>>,
        A::Context: ToEnvelope<A, Tracked<M>>,
    {
        self.addr.send(Tracked::new(msg, &self.stats))
    }

    /// `Addr::do_send`, counted.
    pub fn do_send<M>(&self, msg: M)
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<Tracked<M>>,
        A::Context: ToEnvelope<A, Tracked<M>>,
    {
        self.addr.do_send(Tracked::new(msg, &self.stats));
    }

    /// `Addr::try_send`, counted; a refused message is handed back.
    pub fn try_send<M>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<Tracked<M>>,
        A::Context: ToEnvelope<A, Tracked<M>>,
    {
        self.addr
            .try_send(Tracked::new(msg, &self.stats))
            .map_err(untrack)
    }

    /// A counted recipient of one message type.
    pub fn recipient<M>(&self) -> TrackedRecipient<M>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<Tracked<M>>,
        A::Context: ToEnvelope<A, Tracked<M>>,
    {
        TrackedRecipient {
            rx: self.addr.clone().recipient(),
            stats: self.stats.clone(),
        }
    }
}

/// A `Recipient` that counts what it sends.
pub struct TrackedRecipient<M>
where
    M: Message + Send,
    M::Result: Send,
{
    rx: Recipient<Tracked<M>>,
    stats: Arc<ActorStats>,
}

impl<M> Clone for TrackedRecipient<M>
where
    M: Message + Send,
    M::Result: Send,
{
    fn clone(&self) -> Self {
        TrackedRecipient {
            rx: self.rx.clone(),
            stats: self.stats.clone(),
        }
    }
}

impl<M> fmt::Debug for TrackedRecipient<M>
where
    M: Message + Send,
    M::Result: Send,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackedRecipient")
            .field("kind", &self.stats.kind())
            .field("id", &self.stats.id())
            .finish()
    }
}

impl<M> TrackedRecipient<M>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    /// A recipient of `stats`' actor (the registry's probes).
    pub(crate) fn from_parts(rx: Recipient<Tracked<M>>, stats: Arc<ActorStats>) -> Self {
        TrackedRecipient { rx, stats }
    }

    /// `Recipient::send`, counted.
    pub fn send(&self, msg: M) -> RecipientRequest<Tracked<M>> {
        self.rx.send(Tracked::new(msg, &self.stats))
    }

    /// `Recipient::do_send`, counted.
    pub fn do_send(&self, msg: M) {
        self.rx.do_send(Tracked::new(msg, &self.stats));
    }

    /// `Recipient::try_send`, counted; a refused message is handed back.
    pub fn try_send(&self, msg: M) -> Result<(), SendError<M>> {
        self.rx
            .try_send(Tracked::new(msg, &self.stats))
            .map_err(untrack)
    }

    /// The actor is running.
    pub fn connected(&self) -> bool {
        self.rx.connected()
    }
}
