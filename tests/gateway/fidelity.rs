//! Host behaviours our own simulator used to hide (issue 18), in paused time:
//! - a non-streaming answer that takes 90 s succeeds on its first host (no stall timer between
//!   the receipt and the body; the 20-minute attempt timeout bounds it);
//! - a hedged race whose loser had a receipt lets that loser drain to its finish marker, so its
//!   nonce ends Finished instead of waiting for a timeout that would charge an honest host;
//! - a client-caused host error (receipt, then a bad-request error event) is a 400 to the client
//!   with the host's message, and no host is struck;
//! - a meta event over the SSE line limit after `[DONE]` never faults a delivered answer;
//! - a host that puts `MsgFinalizeRound` / `MsgStartInference` in its mempool changes nothing and
//!   is charged as byzantine.

use std::time::Duration;

use devshard_actors::{
    directory::SetHealthSettings,
    outcome::OutcomeClass,
    policy::{health::HealthStatus, settings::HealthSettings},
    protocol::state::{InferenceStatus, Phase, SessionConfig},
};
use devshard_gateway::sim::{Faults, Profile, SimConfig};

use super::harness::{Answer, Harness};

fn sim(seed: &str) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg.session_config = Some(SessionConfig::default_for_group(3));
    cfg
}

pub async fn no_hedging(h: &Harness) {
    let off = HealthSettings {
        hedge_budget: 0.0,
        hedge_burst: 0.0,
        ..HealthSettings::default()
    };
    h.directory
        .send(SetHealthSettings(off))
        .await
        .unwrap()
        .unwrap();
}

/// The executor index of the next nonce of escrow "42".
async fn next_executor(h: &Harness) -> (u64, usize) {
    let nonce = h.snapshot("42").await.nonce + 1;
    (nonce, (nonce % 3) as usize)
}

/// Warms every host's estimates (so a slow first token triggers a hedge), then puts `fault` on
/// the next nonce's executor; returns that nonce and executor.
async fn warm_then_fault_next(h: &Harness, stream: bool, fault: Faults) -> (u64, usize) {
    for i in 0..9 {
        assert!(h
            .chat(Harness::body(&format!("warm {i}"), stream))
            .await
            .is_success());
    }
    let (nonce, executor) = next_executor(h).await;
    h.sim.set_faults(executor, fault).unwrap();
    (nonce, executor)
}

#[actix_rt::test]
async fn a_90_second_non_streaming_answer_succeeds_on_its_first_host() {
    tokio::time::pause();
    let h = Harness::start(sim("long-answer")).await;
    no_hedging(&h).await;
    let (nonce, executor) = next_executor(&h).await;
    h.sim
        .set_faults(
            executor,
            Faults {
                first_token_delay_ms: Some(90_000),
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    let start = tokio::time::Instant::now();
    let a = h.chat(Harness::body("a long think", false)).await;
    assert!(matches!(a, Answer::Whole(_)), "{a:?}");
    assert!(!a.content().is_empty());
    assert!(start.elapsed() >= Duration::from_secs(90));
    assert_eq!(
        h.snapshot("42").await.nonce,
        nonce,
        "one nonce: no retry on another host"
    );
    let record = h.participant(&h.host(executor)).await;
    assert_eq!(
        record.outcomes.get(&OutcomeClass::HostFault),
        None,
        "{record:?}"
    );
}

#[actix_rt::test]
async fn a_streaming_answer_that_stalls_past_the_stall_timeout_still_fails_over() {
    tokio::time::pause();
    let h = Harness::start(sim("stall-stream")).await;
    no_hedging(&h).await;
    let (nonce, executor) = next_executor(&h).await;
    h.sim
        .set_faults(
            executor,
            Faults {
                first_token_delay_ms: Some(90_000),
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    let a = h.chat(Harness::body("stalls", true)).await;
    assert!(a.is_success(), "{a:?}");
    assert!(
        h.snapshot("42").await.nonce > nonce,
        "the stall timer moved the request to another host"
    );
}

#[actix_rt::test]
async fn a_hedged_loser_with_a_receipt_drains_to_its_finish() {
    tokio::time::pause();
    let h = Harness::start(sim("loser-drains")).await;
    let fault = Faults {
        first_token_delay_ms: Some(8_000),
        times: Some(1),
        ..Default::default()
    };
    let (nonce, executor) = warm_then_fault_next(&h, true, fault).await;
    let a = h.chat(Harness::body("hedged", true)).await;
    assert!(a.is_success(), "{a:?}");
    let hedges: u64 = ["receipttimeout", "firsttokentimeout", "primaryunresponsive"]
        .iter()
        .map(|l| h.metrics.hedges.with_label_values(&[l]).get())
        .sum();
    assert!(hedges >= 1, "the slow primary was hedged");
    assert!(
        h.snapshot("42").await.nonce > nonce,
        "the hedge took a later nonce"
    );
    // The loser drains to its finish; the next diff carries it to every host.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(h.chat(Harness::body("after", true)).await.is_success());
    // The host that executed the last diff has applied every diff up to it.
    let last = h.snapshot("42").await.nonce;
    let view = h.sim.host_view((last % 3) as usize, "42").unwrap();
    let record = view.state.record(nonce).cloned().unwrap();
    assert_eq!(
        record.status,
        InferenceStatus::Finished,
        "the loser's nonce finished: {record:?}"
    );
    let p = h.participant(&h.host(executor)).await;
    assert_eq!(p.outcomes.get(&OutcomeClass::HostFault), None, "{p:?}");
}

#[actix_rt::test]
async fn a_client_caused_host_error_is_a_400_with_the_hosts_message_and_strikes_nobody() {
    tokio::time::pause();
    let h = Harness::start(sim("context-overflow")).await;
    let (nonce, executor) = next_executor(&h).await;
    let message = "This model's maximum context length is 4096 tokens";
    h.sim
        .set_faults(
            executor,
            Faults {
                error_event: Some(serde_json::json!(
                    {"error": {"message": message, "type": "BadRequestError"}}
                )),
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    let a = h.chat(Harness::body("far too long", false)).await;
    let Answer::Failed(e) = a else {
        panic!("expected a client error, got {a:?}")
    };
    assert_eq!(e.status, 400, "{e:?}");
    assert!(e.message.contains(message), "{e:?}");
    assert_eq!(
        h.snapshot("42").await.nonce,
        nonce,
        "no retry on another host"
    );
    tokio::time::sleep(Duration::from_secs(40)).await;
    let p = h.participant(&h.host(executor)).await;
    assert_eq!(p.outcomes.get(&OutcomeClass::HostFault), None, "{p:?}");
    assert!(
        p.outcomes.contains_key(&OutcomeClass::RequestFault),
        "{p:?}"
    );
}

#[actix_rt::test]
async fn a_meta_event_over_the_line_limit_after_done_never_makes_a_delivered_answer_a_fault() {
    tokio::time::pause();
    let mut h = Harness::start(sim("huge-meta")).await;
    h.limits.sse_max_line_bytes = 64 * 1024;
    let (nonce, executor) = next_executor(&h).await;
    h.sim
        .set_faults(
            executor,
            Faults {
                oversize_meta_bytes: Some(100 * 1024),
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    for stream in [true, false] {
        let a = h.chat(Harness::body("huge meta", stream)).await;
        assert!(a.is_success() && !a.content().is_empty(), "{a:?}");
        if stream {
            assert_eq!(
                h.snapshot("42").await.nonce,
                nonce,
                "delivered on the first host"
            );
        }
    }
    // The finish is fetched from the mempool as for a missing meta: a success, never a fault.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let p = h.participant(&h.host(executor)).await;
    assert_eq!(p.outcomes.get(&OutcomeClass::HostFault), None, "{p:?}");
    assert!(p.outcomes.contains_key(&OutcomeClass::Success), "{p:?}");
}

#[test]
fn the_default_sse_line_limit_is_16_mib() {
    assert_eq!(
        devshard_actors::race::RaceLimits::default().sse_max_line_bytes,
        16 << 20
    );
}

#[actix_rt::test]
async fn a_host_injecting_finalize_or_start_through_its_mempool_changes_nothing_and_is_charged() {
    tokio::time::pause();
    let h = Harness::start(sim("byzantine-mempool")).await;
    let (_, executor) = next_executor(&h).await;
    h.sim
        .set_faults(
            executor,
            Faults {
                inject_foreign_txs: true,
                times: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(h.chat(Harness::body("byzantine", true)).await.is_success());
    for i in 0..4 {
        let a = h.chat(Harness::body(&format!("after {i}"), true)).await;
        assert!(a.is_success(), "{a:?}");
    }
    let snap = h.snapshot("42").await;
    assert_eq!(snap.phase, "active", "{snap:?}");
    for i in 0..3 {
        if let Some(v) = h.sim.host_view(i, "42") {
            assert_eq!(v.state.phase(), Phase::Active, "host {i}");
        }
    }
    let m = &h.metrics.mempool_foreign_txs;
    assert_eq!(m.with_label_values(&["finalize_round"]).get(), 1);
    assert_eq!(m.with_label_values(&["start_inference"]).get(), 1);
    let p = h.participant(&h.host(executor)).await;
    assert!(p.outcomes.contains_key(&OutcomeClass::HostFault), "{p:?}");
    assert!(
        p.health.ejections >= 1 && p.health.state != HealthStatus::Healthy,
        "charged as byzantine (ejected at once): {p:?}"
    );
}

/// CI chaos, commit seed `6264415078546872101`: a whole answer's host stalled after its receipt.
/// A hedge won, and the stalled primary, left to drain to its finish, was bounded only by the
/// 20 min attempt cap: its nonce stayed Started, unsettled, far past its 30 s execution
/// deadline, and the escrow's settlement waited on it. The attempt now ends at the deadline and
/// the escrow times the nonce out by vote.
#[actix_rt::test]
async fn seed_6264415078546872101_a_draining_loser_stalled_after_its_receipt_is_timed_out_at_its_deadline(
) {
    tokio::time::pause();
    let mut cfg = sim("loser-stalls");
    let mut session = SessionConfig::default_for_group(3);
    session.execution_timeout = 30;
    session.refusal_timeout = 10;
    cfg.session_config = Some(session);
    let h = Harness::start(cfg).await;
    let fault = Faults {
        stall_after_chunks: Some(0),
        stall_ms: Some(3_600_000),
        times: Some(1),
        ..Default::default()
    };
    let (nonce, executor) = warm_then_fault_next(&h, false, fault).await;
    let a = h
        .chat(Harness::body("stalls after its receipt", false))
        .await;
    assert!(matches!(a, Answer::Whole(_)), "{a:?}");
    assert!(
        h.snapshot("42").await.nonce > nonce,
        "a hedge answered on a later nonce"
    );
    h.sim.clear_faults(executor).unwrap();
    // Past confirmed_at + 30 s + the 5 s buffer, and a vote.
    tokio::time::sleep(Duration::from_secs(45)).await;
    let ended = &h.metrics.execution_deadlines;
    assert_eq!(ended.with_label_values(&["uncrowned"]).get(), 1);
    let snap = h.snapshot("42").await;
    assert!(snap.pending_timeouts.is_empty(), "{snap:?}");
    h.escrow_addr("42")
        .await
        .send(devshard_actors::escrow::messages::SyncHosts)
        .await
        .unwrap();
    let view = h.sim.host_view(0, "42").unwrap();
    let status = view.state.record(nonce).map(|r| r.status);
    assert_eq!(status, Some(InferenceStatus::TimedOut));
}
