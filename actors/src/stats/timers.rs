//! Named timers: `ctx.run_later` / `ctx.run_interval` that show in the actor's [`ActorStats`]
//! with their due time while armed. A [`Timer`] carries its name, so cancelling it always clears
//! the right entry; a fired or cancelled timer never clears a newer arming of the same name.

use std::{borrow::Cow, sync::Arc, time::Duration};

use actix::prelude::*;

use super::ActorStats;

/// An armed timer (cancel it with [`Timer::cancel`]).
#[derive(Debug)]
pub struct Timer {
    handle: SpawnHandle,
    name: Cow<'static, str>,
    generation: u64,
}

impl Timer {
    /// Cancels the timer and clears it from the stats.
    pub fn cancel<A>(self, stats: &ActorStats, ctx: &mut Context<A>)
    where
        A: Actor<Context = Context<A>>,
    {
        stats.disarm_timer(&self.name, self.generation);
        ctx.cancel_future(self.handle);
    }
}

fn due_ms(stats: &ActorStats, delay: Duration) -> i64 {
    let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    stats.now_ms().saturating_add(ms)
}

/// `ctx.run_later(delay, f)`, shown as `name` until it fires or is cancelled.
pub fn run_later<A, F>(
    stats: &Arc<ActorStats>,
    ctx: &mut Context<A>,
    name: impl Into<Cow<'static, str>>,
    delay: Duration,
    f: F,
) -> Timer
where
    A: Actor<Context = Context<A>>,
    F: FnOnce(&mut A, &mut Context<A>) + 'static,
{
    let name = name.into();
    let generation = stats.arm_timer(name.clone(), due_ms(stats, delay));
    let (s, n) = (stats.clone(), name.clone());
    let handle = ctx.run_later(delay, move |act, ctx| {
        s.disarm_timer(&n, generation);
        f(act, ctx);
    });
    Timer {
        handle,
        name,
        generation,
    }
}

/// `ctx.run_interval(every, f)`, shown as `name` with its next tick.
pub fn run_interval<A, F>(
    stats: &Arc<ActorStats>,
    ctx: &mut Context<A>,
    name: impl Into<Cow<'static, str>>,
    every: Duration,
    mut f: F,
) -> Timer
where
    A: Actor<Context = Context<A>>,
    F: FnMut(&mut A, &mut Context<A>) + 'static,
{
    let name = name.into();
    let generation = stats.arm_timer(name.clone(), due_ms(stats, every));
    let (s, n) = (stats.clone(), name.clone());
    let handle = ctx.run_interval(every, move |act, ctx| {
        s.reschedule_timer(&n, generation, due_ms(&s, every));
        f(act, ctx);
    });
    Timer {
        handle,
        name,
        generation,
    }
}
