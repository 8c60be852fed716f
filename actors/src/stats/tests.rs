use std::time::Duration;

use actix::prelude::*;

use super::{
    timers::{self, Timer},
    *,
};
use crate::clock::TokioClock;

/// A small actor: `Hold` pauses its mailbox, `Ping` answers, `Boom` panics.
struct Probe {
    stats: StatsSlot,
    timer: Option<Timer>,
}

impl Actor for Probe {
    type Context = Context<Self>;
}

tracked_actor!(Probe);

#[derive(Message)]
#[rtype(result = "u32")]
struct Ping(u32);

impl Handler<Ping> for Probe {
    type Result = u32;

    fn handle(&mut self, msg: Ping, _: &mut Context<Self>) -> u32 {
        msg.0 + 1
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Hold(Duration);

impl Handler<Hold> for Probe {
    type Result = ();

    fn handle(&mut self, msg: Hold, ctx: &mut Context<Self>) {
        ctx.wait(tokio::time::sleep(msg.0).into_actor(self));
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Boom;

impl Handler<Boom> for Probe {
    type Result = ();

    fn handle(&mut self, _: Boom, _: &mut Context<Self>) {
        panic!("boom");
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Arm(Duration);

impl Handler<Arm> for Probe {
    type Result = ();

    fn handle(&mut self, msg: Arm, ctx: &mut Context<Self>) {
        if let Some(t) = self.timer.take() {
            t.cancel(&self.stats, ctx);
        }
        let t = timers::run_later(&self.stats, ctx, "tick", msg.0, |act: &mut Probe, _| {
            act.timer = None;
        });
        self.timer = Some(t);
    }
}

fn start(registry: &ActorRegistry, id: &str) -> TrackedAddr<Probe> {
    let clock = TokioClock::anchored_at(1_000_000).shared();
    Probe {
        stats: registry.register(Kind::Escrow, id, &clock),
        timer: None,
    }
    .start_tracked()
}

#[actix::test]
async fn a_stuck_mailbox_shows_its_depth_and_drains_to_zero() {
    tokio::time::pause();
    let registry = ActorRegistry::default();
    let addr = start(&registry, "a");
    assert_eq!(addr.send(Ping(1)).await.unwrap(), 2);
    addr.do_send(Hold(Duration::from_secs(10)));
    for i in 0..5 {
        addr.do_send(Ping(i));
    }
    let stats = registry.list().pop().unwrap();
    for _ in 0..100 {
        if stats.handled() == 2 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(stats.mailbox_depth(), 5, "queued behind the hold");
    assert_eq!(stats.handled(), 2);
    // A request that gives up while queued is skipped by actix: it still leaves the count.
    let gave_up = addr.send(Ping(9)).timeout(Duration::from_millis(5)).await;
    assert!(matches!(gave_up, Err(MailboxError::Timeout)));
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(addr.send(Ping(0)).await.unwrap(), 1);
    assert_eq!(stats.mailbox_depth(), 0);
    assert_eq!(stats.handled(), 8, "hold, ping, 5 queued, the last ping");
    // Tokio's timer rounds each virtual sleep up to the next millisecond.
    let at = stats.view(stats.now_ms()).last_message_at.unwrap();
    assert!((1_011_005..1_011_020).contains(&at), "{at}");
}

#[actix::test]
async fn refused_and_undelivered_messages_leave_no_depth() {
    let registry = ActorRegistry::default();
    let addr = start(&registry, "b");
    let stats = addr.stats().clone();
    addr.do_send(Boom);
    assert!(matches!(
        addr.send(Ping(1)).await,
        Err(MailboxError::Closed)
    ));
    assert!(matches!(
        addr.try_send(Ping(2)),
        Err(SendError::Closed(Ping(2)))
    ));
    addr.do_send(Ping(3));
    assert_eq!(stats.mailbox_depth(), 0);
    assert!(registry.is_empty(), "a panicked actor is unlisted");
}

#[actix::test]
async fn timers_show_their_due_time_until_they_fire_or_are_cancelled() {
    tokio::time::pause();
    let registry = ActorRegistry::default();
    let addr = start(&registry, "c");
    let stats = addr.stats().clone();
    addr.send(Arm(Duration::from_secs(5))).await.unwrap();
    let v = stats.view(stats.now_ms());
    assert_eq!(v.timers.len(), 1);
    assert_eq!(
        (v.timers[0].name.as_str(), v.timers[0].due_in_ms),
        ("tick", 5_000)
    );
    // Re-armed: one entry, the new due time; the cancelled one never clears it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    addr.send(Arm(Duration::from_secs(5))).await.unwrap();
    let v = stats.view(stats.now_ms());
    assert_eq!(v.timers.len(), 1);
    assert!(
        (1_006_000..1_006_010).contains(&v.timers[0].due_at),
        "{v:?}"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    addr.send(Ping(0)).await.unwrap();
    assert!(stats.view(stats.now_ms()).timers.is_empty(), "fired");
}

#[actix::test]
async fn interval_timers_move_their_due_time() {
    tokio::time::pause();
    let clock = TokioClock::anchored_at(0).shared();
    let registry = ActorRegistry::default();
    let slot = registry.register(Kind::Directory, "d", &clock);
    let stats = (*slot).clone();
    let probe = Probe {
        stats: slot,
        timer: None,
    };
    let addr = Probe::create(move |ctx| {
        let s = probe.stats.clone();
        let _ = timers::run_interval(&s, ctx, "every", Duration::from_secs(2), |_, _| {});
        probe
    });
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    addr.send(Ping(0)).await.unwrap();
    let v = stats.view(stats.now_ms());
    assert_eq!(v.timers[0].name, "every");
    assert!((6_000..6_010).contains(&v.timers[0].due_at), "{v:?}");
    drop(addr);
}
