//! The pacing rule, and tickets in paused time.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn host(i: u8) -> Address {
    Address::unchecked(format!("0x{}", format!("{i:02x}").repeat(20)))
}

fn links(min_ms: u64, max_wait_ms: u64) -> Links {
    let settings = LinkSettings {
        enabled: true,
        min: MS * u32::try_from(min_ms).unwrap(),
        max: Duration::from_secs(1),
        half_life: Duration::from_secs(30),
        max_wait: MS * u32::try_from(max_wait_ms).unwrap(),
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    Links::new(settings, ActorMetrics::detached().unwrap(), log)
}

#[test]
fn a_body_waits_for_the_bodies_it_depends_on_to_have_left_a_horizon_ago() {
    let t0 = Instant::now();
    let h = 50 * MS;
    // Bodies to one host every 7 nonces; body 70 carries the diffs above 6: it depends on
    // body 7 only (the first above 6), which left long ago.
    let bodies = [
        (7, Some(t0)),
        (14, Some(t0 + 100 * MS)),
        (21, Some(t0 + 110 * MS)),
    ];
    assert_eq!(gate(bodies, 70, 6, h, t0 + 120 * MS), Gate::Go);
    // Body 70 carrying the diffs above 13 depends on bodies 7 and 14: 14 left 20 ms ago.
    assert_eq!(
        gate(bodies, 70, 13, h, t0 + 120 * MS),
        Gate::Until(t0 + 150 * MS)
    );
    assert_eq!(gate(bodies, 70, 13, h, t0 + 150 * MS), Gate::Go);
    // A dependency not sent yet: wait for it, whatever the time.
    let unsent = [(7, Some(t0)), (14, None), (21, None)];
    assert_eq!(gate(unsent, 70, 13, h, t0 + 900 * MS), Gate::Behind(14));
    // Bodies after the nonce, and bodies above the first one past `after`, do not matter.
    assert_eq!(gate(unsent, 14, 6, h, t0 + 900 * MS), Gate::Go);
    assert_eq!(gate([(21, None)], 14, 6, h, t0), Gate::Go);
    // No horizon: optimistic, only the order of sends is kept.
    assert_eq!(
        gate(bodies, 70, 20, Duration::ZERO, t0 + 110 * MS),
        Gate::Go
    );
    assert_eq!(gate(unsent, 70, 20, Duration::ZERO, t0), Gate::Behind(14));
}

#[tokio::test(start_paused = true)]
async fn tickets_leave_in_turn_and_a_dropped_one_releases_who_waits_for_it() {
    let l = links(40, 2_000);
    let a = host(1);
    let first = l.register(&a, 7, 0).unwrap();
    let second = l.register(&a, 14, 6).unwrap();
    let third = l.register(&a, 21, 13).unwrap();
    let t0 = Instant::now();
    // The third depends on the first two: it waits for them.
    let waiting = tokio::spawn({
        let third = third.clone();
        async move {
            third.ready().await;
            Instant::now()
        }
    });
    tokio::task::yield_now().await;
    assert_eq!(l.view()[0].waiting, 1);
    first.ready().await;
    assert_eq!(
        Instant::now(),
        t0,
        "nothing before the first: it leaves at once"
    );
    // The second waits the horizon after the first (it needs the diff only the first carried).
    second.ready().await;
    assert_eq!(Instant::now(), t0 + 40 * MS);
    let left = waiting.await.unwrap();
    assert_eq!(
        left,
        t0 + 80 * MS,
        "the third leaves a horizon after the second"
    );
    let view = &l.view()[0];
    assert_eq!((view.waiting, view.paced, view.unsent), (0, 2, 0));

    // A dependency dropped before it left (its race gave up) no longer holds anyone: body 35
    // then depends on what is left below it (body 21, a horizon after which it goes).
    let dropped = l.register(&a, 28, 20).unwrap();
    let next = l.register(&a, 35, 27).unwrap();
    let t1 = Instant::now();
    let waiting = tokio::spawn(async move {
        next.ready().await;
        Instant::now()
    });
    tokio::time::sleep(10 * MS).await;
    assert_eq!(l.view()[0].unsent, 2);
    drop(dropped);
    assert_eq!(waiting.await.unwrap(), t1 + 40 * MS);
    assert_eq!(l.view()[0].unsent, 0);
}

#[tokio::test(start_paused = true)]
async fn a_body_waits_at_most_the_max_wait_and_overtaking_raises_the_horizon() {
    let l = links(0, 300);
    let a = host(2);
    let stuck = l.register(&a, 7, 0).unwrap();
    let behind = l.register(&a, 14, 6).unwrap();
    let t0 = Instant::now();
    behind.ready().await;
    assert_eq!(Instant::now(), t0 + 300 * MS, "left after link_max_wait_ms");
    assert_eq!(l.view()[0].expired, 1);
    drop(stuck);

    // Optimistic link: bodies leave at once; then body 28 overtakes body 21 (sent 30 ms
    // before it) and the host holds only 20: the horizon rises to 1.25 × 30 ms.
    let b = host(3);
    let early = l.register(&b, 21, 14).unwrap();
    early.ready().await;
    tokio::time::sleep(30 * MS).await;
    let late = l.register(&b, 28, 21).unwrap();
    late.ready().await;
    assert_eq!(l.view()[1].reorder_horizon_ms, 0.0);
    late.overtaken(20);
    let view = &l.view()[1];
    assert_eq!(view.overtaken, 1);
    assert!((view.reorder_horizon_ms - 37.5).abs() < 0.01, "{view:?}");
    // A lost session (holds 0) is not overtaking.
    late.overtaken(0);
    assert_eq!(l.view()[1].overtaken, 1);
    // The next body depending on body 28 now waits the learnt horizon.
    let after = l.register(&b, 35, 28).unwrap();
    let t1 = Instant::now();
    after.ready().await;
    let waited = Instant::now() - t1;
    // (the timer wheel rounds up to the millisecond)
    assert!(
        waited >= MS.mul_f64(37.5) && waited <= 39 * MS,
        "{waited:?}"
    );
}

#[test]
fn without_pacing_no_ticket() {
    let settings = LinkSettings {
        enabled: false,
        min: Duration::ZERO,
        max: Duration::ZERO,
        half_life: Duration::from_secs(1),
        max_wait: Duration::ZERO,
    };
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let l = Links::new(settings, ActorMetrics::detached().unwrap(), log);
    assert!(l.register(&host(1), 7, 0).is_none());
    assert!(l.view().is_empty());
}
