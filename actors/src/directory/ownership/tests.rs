//! The ownership plan on the situations a cluster goes through: a cold start, a replica joining,
//! one dying, one restarting with its id, a lost lease, and a few replicas planning in turn until
//! nothing moves.

use super::*;

fn ids(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn lease(escrow: &str, owner: &str, expires_in_ms: i64) -> LeaseView {
    LeaseView {
        escrow_id: escrow.into(),
        owner: owner.into(),
        epoch: 1,
        expires_in_ms,
    }
}

const SIX: [&str; 6] = ["e1", "e2", "e3", "e4", "e5", "e6"];

fn plan(
    me: &str,
    live: &[&str],
    running: &[&str],
    leases: &[LeaseView],
    unclaimable: &[&str],
) -> OwnershipPlan {
    let live: Vec<String> = live.iter().map(|s| s.to_string()).collect();
    plan_ownership(OwnershipInput {
        me,
        live: &live,
        registered: &ids(&SIX),
        running: &ids(running),
        unclaimable: &ids(unclaimable),
        leases,
    })
}

fn claims(p: &OwnershipPlan) -> Vec<(String, ClaimKind)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            OwnershipAction::Claim { escrow, kind } => Some((escrow.clone(), *kind)),
            _ => None,
        })
        .collect()
}

fn releases(p: &OwnershipPlan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            OwnershipAction::Release { escrow } => Some(escrow.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lone_replica_claims_every_free_escrow() {
    let p = plan("a", &[], &[], &[], &[]);
    assert_eq!((p.share, p.owned, p.replicas), (6, 0, 1));
    let c = claims(&p);
    assert_eq!(c.len(), 6);
    assert!(c.iter().all(|(_, k)| *k == ClaimKind::Free));
}

#[test]
fn shares_are_even_and_the_first_ids_take_the_remainder() {
    let live: BTreeSet<&str> = ["c", "a", "b"].into_iter().collect();
    let s = shares(&live, 7);
    assert_eq!(s.values().copied().collect::<Vec<_>>(), [3, 2, 2]);
    assert_eq!(s.get("a"), Some(&3));
    assert_eq!(shares(&live, 6).values().sum::<usize>(), 6);
}

#[test]
fn a_joining_replica_gets_the_surplus_released_to_it() {
    // A owns all six; B joined and owns none.
    let leases: Vec<_> = SIX.iter().map(|e| lease(e, "a", 5_000)).collect();
    let p = plan("a", &["a", "b"], &SIX, &leases, &[]);
    assert_eq!((p.share, p.owned), (3, 6));
    let released = releases(&p);
    assert_eq!(released.len(), 3);
    // B claims nothing yet (all leased to a live A), and is told no expiry to wait for.
    let pb = plan("b", &["a", "b"], &[], &leases, &[]);
    assert!(
        pb.actions.is_empty() && pb.next_expiry_ms.is_none(),
        "{pb:?}"
    );
    // Once released, B takes exactly those.
    let after: Vec<_> = leases
        .iter()
        .map(|l| match released.contains(&l.escrow_id) {
            true => lease(&l.escrow_id, "a", 0),
            false => l.clone(),
        })
        .collect();
    let pb = plan("b", &["a", "b"], &[], &after, &[]);
    let mut taken: Vec<_> = claims(&pb).into_iter().map(|(e, _)| e).collect();
    taken.sort();
    let mut released = released;
    released.sort();
    assert_eq!(taken, released);
}

#[test]
fn a_dead_replicas_escrows_are_taken_when_its_leases_expire() {
    let mut leases = vec![
        lease("e1", "a", 3_000),
        lease("e2", "a", 3_000),
        lease("e3", "b", 3_000),
        lease("e4", "b", 3_000),
        lease("e5", "c", 1_200),
        lease("e6", "c", 900),
    ];
    // C's heartbeat expired; its leases run for another 900 ms: A waits for them.
    let p = plan("a", &["a", "b"], &["e1", "e2"], &leases, &[]);
    assert_eq!((p.share, p.owned), (3, 2));
    assert!(p.actions.is_empty());
    assert_eq!(p.next_expiry_ms, Some(900));
    // Expired: A takes one over, B the other (each up to its share of three).
    leases[4].expires_in_ms = -5;
    leases[5].expires_in_ms = -1;
    let pa = claims(&plan("a", &["a", "b"], &["e1", "e2"], &leases, &[]));
    let pb = claims(&plan("b", &["a", "b"], &["e3", "e4"], &leases, &[]));
    assert_eq!(pa.len(), 1);
    assert_eq!(pb.len(), 1);
    assert!(pa.iter().chain(&pb).all(|(_, k)| *k == ClaimKind::TakeOver));
}

#[test]
fn a_restarted_replica_resumes_its_own_leases_first() {
    let leases = vec![
        lease("e1", "a", 4_000),
        lease("e2", "a", 4_000),
        lease("e3", "b", 4_000),
        lease("e4", "b", 4_000),
        lease("e5", "b", 4_000),
        lease("e6", "b", 4_000),
    ];
    let p = plan("a", &["a", "b"], &[], &leases, &[]);
    let mut c = claims(&p);
    c.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        c,
        [
            ("e1".to_string(), ClaimKind::Resume),
            ("e2".to_string(), ClaimKind::Resume)
        ]
    );
    // An escrow being handed over (unclaimable) is not resumed.
    let p = plan("a", &["a", "b"], &["e1"], &leases, &["e2"]);
    assert!(claims(&p).is_empty(), "{p:?}");
}

#[test]
fn an_escrow_whose_lease_another_replica_took_is_stopped() {
    let leases = vec![lease("e1", "b", 4_000)];
    let p = plan("a", &["a", "b"], &["e1"], &leases, &[]);
    assert!(p.actions.contains(&OwnershipAction::Lost {
        escrow: "e1".into(),
        owner: "b".into()
    }));
}

/// Replicas planning in turn over a shared lease table converge to even shares and stay there.
#[test]
fn replicas_planning_in_turn_settle_on_even_shares() {
    let replicas = ["a", "b", "c"];
    let mut table: BTreeMap<String, String> = BTreeMap::new();
    for round in 0..6 {
        let mut moves = 0;
        for me in replicas {
            let leases: Vec<_> = table.iter().map(|(e, o)| lease(e, o, 5_000)).collect();
            let running: Vec<&str> = table
                .iter()
                .filter(|(_, o)| o.as_str() == me)
                .map(|(e, _)| e.as_str())
                .collect();
            let p = plan(me, &replicas, &running, &leases, &[]);
            for a in p.actions {
                moves += 1;
                match a {
                    OwnershipAction::Claim { escrow, .. } => {
                        table.insert(escrow, me.to_string());
                    }
                    OwnershipAction::Release { escrow } => {
                        table.remove(&escrow);
                    }
                    OwnershipAction::Lost { .. } => panic!("nothing is lost here"),
                }
            }
        }
        if round >= 2 {
            assert_eq!(moves, 0, "round {round}: still moving: {table:?}");
        }
    }
    for me in replicas {
        assert_eq!(table.values().filter(|o| o.as_str() == me).count(), 2);
    }
}
