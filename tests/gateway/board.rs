//! The escrow board the HTTP edge picks from without a message to the directory
//! (`actors/src/directory/board.rs`): it follows escrows as they are added, close and are removed;
//! a draining escrow is never picked; picks running at once on many threads never overcommit an
//! escrow's nonce margin or its balance; races in flight are counted exactly under concurrency.

use std::{
    collections::BTreeSet,
    sync::{atomic::Ordering, Arc},
    thread,
};

use devshard_actors::{
    directory::{
        pick::reserved_cost, CloseEscrow, DirectoryError, GetStatus, PickEscrow, PickedEscrow,
        RaceEnded, RaceStarted, RemoveEscrow,
    },
    policy::reason::PickRefusal,
    store::MemoryStore,
};
use devshard_gateway::sim::SimConfig;

use crate::harness::Harness;

const INPUT: u64 = 100;

fn ask<'a>(model: &'a str, request_id: &'a str, max_tokens: u64) -> PickEscrow<'a> {
    static NONE: BTreeSet<String> = BTreeSet::new();
    PickEscrow {
        model,
        request_id,
        input_bytes: INPUT,
        max_tokens,
        deactivated: &NONE,
        closed: &[],
        only_hosts: None,
    }
}

async fn harness(seed: &str, escrows: &[&str], max_nonce: Option<u64>) -> Harness {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 3;
    cfg.escrow_ids = escrows.iter().map(|e| e.to_string()).collect();
    Harness::start_mapped(
        cfg,
        Arc::new(MemoryStore::new()),
        Default::default(),
        move |_, mut info| async move {
            if let Some(m) = max_nonce {
                info.max_nonce = m;
            }
            info
        },
    )
    .await
}

/// Every thread picks once and keeps what it got; the picks that succeeded.
fn pick_from_threads(h: &Harness, threads: usize, max_tokens: u64) -> Vec<PickedEscrow> {
    let model = h.sim.config().model.clone();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (board, model) = (h.board.clone(), model.clone());
            thread::spawn(move || board.pick(&ask(&model, &format!("r{i}"), max_tokens)).ok())
        })
        .collect();
    handles
        .into_iter()
        .filter_map(|t| t.join().unwrap())
        .collect()
}

#[actix_rt::test]
async fn the_board_follows_escrows_as_they_are_added_closed_and_removed() {
    let h = harness("board-follows", &["1", "2"], None).await;
    let model = h.sim.config().model.clone();
    let board = h.board.load();
    assert_eq!(board.models, vec![model.clone()]);
    let ids: Vec<&str> = board.escrows.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["1", "2"]);

    // Escrow 1 drains: the board says so at once and every pick goes to 2.
    h.directory
        .send(CloseEscrow {
            escrow_id: "1".into(),
        })
        .await
        .unwrap();
    assert!(h.board.load().escrows[0].closed);
    for i in 0..6 {
        let p = h.board.pick(&ask(&model, &format!("a{i}"), 10)).unwrap();
        assert_eq!(p.escrow_id, "2", "a draining escrow is never picked");
    }

    // Both drain: the refusal names each escrow as draining.
    h.directory
        .send(CloseEscrow {
            escrow_id: "2".into(),
        })
        .await
        .unwrap();
    match h.board.pick(&ask(&model, "b", 10)) {
        Err(DirectoryError::NoneQualifies { refusals, .. }) => assert_eq!(
            refusals,
            vec![
                ("1".to_string(), PickRefusal::Draining),
                ("2".to_string(), PickRefusal::Draining)
            ]
        ),
        other => panic!("expected both refused as draining, got {other:?}"),
    }

    // Removed escrows leave the board and their model with them.
    for id in ["1", "2"] {
        h.directory
            .send(RemoveEscrow {
                escrow_id: id.into(),
                purge: false,
            })
            .await
            .unwrap()
            .unwrap();
    }
    let board = h.board.load();
    assert!(board.escrows.is_empty() && board.models.is_empty());
    assert!(matches!(
        h.board.pick(&ask(&model, "c", 10)),
        Err(DirectoryError::UnknownModel(m)) if m == model
    ));
}

#[actix_rt::test]
async fn picks_on_many_threads_at_once_never_overcommit_the_nonce_margin() {
    // 3 hosts: N + 1 = 4 nonces of margin below the serving limit `max_nonce − 4`, one more per
    // request on its way; nonce 0 → exactly `max_nonce − 8` requests fit.
    let h = harness("board-nonces", &["7"], Some(8 + 5)).await;
    let picked = pick_from_threads(&h, 24, 10);
    assert_eq!(
        picked.len(),
        5,
        "exactly the requests the nonce margin allows"
    );
    drop(picked);
    assert_eq!(pick_from_threads(&h, 24, 10).len(), 5, "reservations ended");
}

#[actix_rt::test]
async fn picks_on_many_threads_at_once_never_overcommit_the_balance() {
    let h = harness("board-balance", &["7"], None).await;
    let board = h.board.load();
    let e = &board.escrows[0];
    let spendable = e.budget.check(|b| b.spendable());
    let cfg = &e.info.config;
    // A worst case that fits 5 times (and not 6) in the balance.
    let max_tokens = (spendable / 5 - cfg.fee_per_nonce) / cfg.token_price - INPUT - 256;
    let cost = reserved_cost(INPUT, max_tokens, cfg.token_price, cfg.fee_per_nonce);
    let fits = usize::try_from(spendable / cost).unwrap();
    assert_eq!(fits, 5);
    let picked = pick_from_threads(&h, 24, max_tokens);
    assert_eq!(
        picked.len(),
        fits,
        "exactly the requests the balance covers"
    );
    assert_eq!(e.budget.check(|b| b.reservations.len()), fits);
    drop(picked);
    assert_eq!(e.budget.check(|b| b.reservations.len()), 0);
}

#[actix_rt::test]
async fn races_in_flight_are_counted_exactly_and_weigh_the_pick() {
    let h = harness("board-races", &["1", "2"], None).await;
    let model = h.sim.config().model.clone();
    let starts: Vec<_> = (0..200u64)
        .map(|race_id| {
            h.directory.send(RaceStarted {
                race_id,
                escrow_id: "1".into(),
                request_id: format!("r{race_id}"),
            })
        })
        .collect();
    futures::future::join_all(starts).await;
    let board = h.board.load();
    assert_eq!(board.escrows[0].in_flight.load(Ordering::Relaxed), 200);
    // Escrow 1 is loaded, 2 is idle: every pick goes to 2.
    for i in 0..4 {
        let p = h.board.pick(&ask(&model, &format!("p{i}"), 10)).unwrap();
        assert_eq!(p.escrow_id, "2");
    }
    // Every race ends, one twice: the count returns to zero and never wraps.
    let ends: Vec<_> = (0..200u64)
        .chain([7])
        .map(|race_id| {
            h.directory.send(RaceEnded {
                race_id,
                escrow_id: "1".into(),
            })
        })
        .collect();
    futures::future::join_all(ends).await;
    assert_eq!(board.escrows[0].in_flight.load(Ordering::Relaxed), 0);
    let status = h.directory.send(GetStatus).await.unwrap();
    assert!(status.entities.iter().all(|e| e.in_flight == 0));
    // Both idle: ties rotate between them.
    let mut seen = BTreeSet::new();
    for i in 0..4 {
        seen.insert(
            h.board
                .pick(&ask(&model, &format!("q{i}"), 10))
                .unwrap()
                .escrow_id,
        );
    }
    assert_eq!(seen.len(), 2);
}

/// What the replicas' forwarding asks before a request's cost is known
/// (`BoardEscrow::takes_requests`): an escrow takes requests until admission would refuse any —
/// deactivated, draining, or its nonce margin held by requests on their way.
#[actix_rt::test]
async fn an_escrow_takes_requests_until_admission_would_refuse_any() {
    // 3 hosts, max_nonce 12: serving limit 8, margin N + 1 = 4, one more per request on its way.
    let h = harness("board-takes", &["1"], Some(12)).await;
    let model = h.sim.config().model.clone();
    let none = BTreeSet::new();
    let takes = |off: &BTreeSet<String>| h.board.load().escrows[0].takes_requests(off);
    assert!(takes(&none));
    assert!(!takes(&BTreeSet::from(["1".to_string()])), "deactivated");
    let mut picked = Vec::new();
    while let Ok(p) = h
        .board
        .pick(&ask(&model, &format!("r{}", picked.len()), 10))
    {
        picked.push(p);
    }
    assert_eq!(picked.len(), 4, "max_nonce − 8 requests fit");
    assert!(
        !takes(&none),
        "its nonce margin is held: another replica's escrow serves"
    );
    h.directory
        .send(CloseEscrow {
            escrow_id: "1".into(),
        })
        .await
        .unwrap();
    assert!(!takes(&none), "draining");
}
