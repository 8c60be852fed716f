//! Which hosts invariant 3's second half judges after a round of shared faults: "no host stays
//! ejected or on probation for a fault that several hosts shared".
//!
//! docs/health.md §1 decides what a fault several hosts show means. A fault that never carries
//! a strike by its class (403 owner mismatch: an escrow fault; 429 and 503: overload) must
//! never eject anyone, whoever else answered. A fault that is a host fault by its class
//! (refused connections, a host down, 500, 401 drift, 404) is shared only while no host
//! succeeded in between (the correlation guard); while a healthy host outside the round keeps
//! answering, relative evidence makes each faulted host's failures its own, and ejecting it is
//! the documented behaviour (`tests/gateway/health.rs`: host-borne faults on 2 of 7 hosts
//! eject exactly those 2). Found by the hour-long run (seed `long-1`, 100 streams): 401 on 2 of
//! 5 hosts while 3 served, and the runner reported the designed ejection as a violation.

use std::collections::BTreeSet;

use serde_json::Value;

use super::apply::Health;

/// Whether a shared knob of the schedule can carry a strike (docs/health.md §1 table): every
/// knob but 403, 429 and 503.
pub fn knob_can_strike(faults: &Value) -> bool {
    !matches!(faults["http_status"].as_u64(), Some(403 | 429 | 503))
}

/// The hosts to judge: those that suffered only shared faults in the round (`shared` less
/// `excluded`), unless a knob of the round can strike and a host outside the round was routable
/// before it (healthy, suspect or on probation: it kept answering, so the faulted hosts'
/// failures are their own) or came back from its ejection before `now_ms` (the judgement, at the
/// clear: the rotating hour-long run, clear at 346 s, 401 on four hosts while the fifth, ejected
/// when the round began, came back on probation and served, so the gateway struck one of the
/// four on relative evidence).
pub fn judged_after_shared(
    shared: &BTreeSet<String>,
    excluded: &BTreeSet<String>,
    all: &[String],
    baseline: &Health,
    can_strike: bool,
    now_ms: i64,
) -> Vec<String> {
    let peer_answered = all.iter().any(|a| {
        !shared.contains(a)
            && !excluded.contains(a)
            && baseline
                .get(a)
                .is_some_and(|(state, _, until)| state != "ejected" || *until <= now_ms)
    });
    if can_strike && peer_answered {
        return Vec::new();
    }
    shared.difference(excluded).cloned().collect()
}

/// The hosts to judge after a round: each shared event judged on its own
/// ([`judged_after_shared`]), so that the hosts of another shared event count as peers. The
/// rotating hour-long run (seed long-1, clear at 292 s): two hosts down for 880 ms, and 120 ms
/// later two others refusing connections, judged as one shared fault of four hosts; the two
/// refusing hosts had served while the first two failed, so the gateway rightly struck the
/// first two (relative evidence), and the runner reported the designed ejection as a violation.
pub fn judged_after_round(
    events: &[(BTreeSet<String>, bool)],
    excluded: &BTreeSet<String>,
    all: &[String],
    baseline: &Health,
    now_ms: i64,
) -> Vec<String> {
    let mut judged = BTreeSet::new();
    for (hosts, can_strike) in events {
        judged.extend(judged_after_shared(
            hosts,
            excluded,
            all,
            baseline,
            *can_strike,
            now_ms,
        ));
    }
    judged.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(xs: &[&str]) -> BTreeSet<String> {
        xs.iter().map(|s| (*s).to_owned()).collect()
    }

    fn all() -> Vec<String> {
        ["a", "b", "c", "d", "e"].map(str::to_owned).to_vec()
    }

    fn healthy(xs: &[&str]) -> Health {
        xs.iter()
            .map(|s| ((*s).to_owned(), ("healthy".to_owned(), 0, 0)))
            .collect()
    }

    #[test]
    fn only_403_429_and_503_never_strike() {
        for s in [403, 429, 503] {
            assert!(!knob_can_strike(&json!({"http_status": s})));
        }
        for k in [
            json!({"http_status": 401}),
            json!({"http_status": 404}),
            json!({"http_status": 500}),
            json!({"refuse_connections": true}),
            json!({"down_for_ms": 900}),
        ] {
            assert!(knob_can_strike(&k), "{k}");
        }
    }

    #[test]
    fn seed_long_1_a_striking_fault_on_two_of_five_while_three_served_is_not_judged() {
        let base = healthy(&["a", "b", "c", "d", "e"]);
        let shared = set(&["d", "e"]);
        let none = BTreeSet::new();
        assert!(judged_after_shared(&shared, &none, &all(), &base, true, 0).is_empty());
        // The same 401 on every host: nobody could answer, both are judged.
        let every = set(&["a", "b", "c", "d", "e"]);
        assert_eq!(
            judged_after_shared(&every, &none, &all(), &base, true, 0).len(),
            5
        );
        // A 503 on two hosts never strikes: judged whoever answered.
        assert_eq!(
            judged_after_shared(&shared, &none, &all(), &base, false, 0),
            vec!["d".to_owned(), "e".to_owned()]
        );
    }

    #[test]
    fn seed_long_1_a_suspect_host_outside_the_round_still_answered() {
        let mut base = healthy(&["a", "b", "d", "e"]);
        base.insert("c".to_owned(), ("suspect".to_owned(), 0, 0));
        for h in ["a", "b"] {
            base.insert(h.to_owned(), ("ejected".to_owned(), 1, i64::MAX));
        }
        let shared = set(&["d", "e"]);
        assert!(judged_after_shared(&shared, &BTreeSet::new(), &all(), &base, true, 0).is_empty());
    }

    #[test]
    fn hosts_outside_the_round_that_were_ejected_or_had_their_own_fault_are_no_peers() {
        // a, b, c ejected before the round: nobody healthy answered for d and e.
        let mut base = healthy(&["d", "e"]);
        for h in ["a", "b", "c"] {
            base.insert(h.to_owned(), ("ejected".to_owned(), 1, i64::MAX));
        }
        let shared = set(&["d", "e"]);
        let judged = judged_after_shared(&shared, &BTreeSet::new(), &all(), &base, true, 0);
        assert_eq!(judged.len(), 2);
        // c healthy but given a fault of its own in the round; e excluded too.
        let base = healthy(&["a", "b", "c", "d", "e"]);
        let shared = set(&["a", "b", "d", "e"]);
        let excluded = set(&["c", "e"]);
        let judged = judged_after_shared(&shared, &excluded, &all(), &base, true, 0);
        assert_eq!(judged, vec!["a".to_owned(), "b".to_owned(), "d".to_owned()]);
    }

    #[test]
    fn rotating_long_run_two_shared_events_of_a_round_are_judged_apart() {
        // a ejected before the round; b, e down (can strike), then c, d refusing (can strike).
        let mut base = healthy(&["b", "c", "d", "e"]);
        base.insert("a".to_owned(), ("ejected".to_owned(), 3, i64::MAX));
        let none = BTreeSet::new();
        let events = vec![(set(&["b", "e"]), true), (set(&["c", "d"]), true)];
        assert!(
            judged_after_round(&events, &none, &all(), &base, 0).is_empty(),
            "c and d answered while b and e failed, and the other way round"
        );
        let union = set(&["b", "c", "d", "e"]);
        assert_eq!(
            judged_after_shared(&union, &none, &all(), &base, true, 0).len(),
            4,
            "judged as one event, all four (the runner's old, too strict reading)"
        );
        let quiet = vec![(set(&["b", "e"]), false), (set(&["c", "d"]), true)];
        assert_eq!(
            judged_after_round(&quiet, &none, &all(), &base, 0),
            vec!["b".to_owned(), "e".to_owned()],
            "a 503 never strikes, whoever answered"
        );
    }

    #[test]
    fn rotating_long_run_a_peer_back_from_its_ejection_during_the_round_answered() {
        let mut base = healthy(&["a", "b", "c", "d"]);
        base.insert("e".to_owned(), ("ejected".to_owned(), 3, 5_000));
        let four = set(&["a", "b", "c", "d"]);
        let none = BTreeSet::new();
        assert!(
            judged_after_shared(&four, &none, &all(), &base, true, 5_000).is_empty(),
            "e's ejection ended before the clear: it served while the four failed"
        );
        assert_eq!(
            judged_after_shared(&four, &none, &all(), &base, true, 4_999).len(),
            4,
            "still ejected at the clear: nobody answered for the four"
        );
    }
}
