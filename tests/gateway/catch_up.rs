//! Catching a host up from far behind (issue 18), in paused time, over real loopback HTTP:
//! - every POST is signed as it leaves, so a host 5 000 diffs behind on a slow link (each chunk a
//!   2 s round trip, the whole catch-up about 50 s, past the hosts' 30 s drift window) is
//!   caught up with no 401 — signed at grant time, its later chunks were minutes old;
//! - a `NonceGap` answer sends the same nonce again with every diff above what the host says it
//!   holds (not from nonce 1), and the request is served on that host;
//! - both with a diff window (`[escrow] diff_window`) far smaller than the catch-up: the diffs
//!   below it are read back from the store (`devshard_diffs_from_store_total`) and every answer
//!   at their nonces is still verified.
//!
//! The gateway's durable log is filled before the escrow actor starts (diffs the gateway composed
//! and signed, as after a long run no host saw): the escrow restores it and the simulated hosts
//! check every diff, signature and timestamp as a real host does.

use std::{sync::Arc, time::Duration};

use devshard_actors::{
    escrow::{session::Session, EscrowConfig, EscrowInfo},
    host::{client, RequestSigner},
    outcome::OutcomeClass,
    protocol::{
        crypto::Address,
        diff::Diff,
        wire::{DiffJson, InferenceRequest},
    },
    store::{ns, Ack, MemoryStore, SharedStore},
};
use devshard_gateway::sim::{LatencyProfile, Profile, SimConfig, SimNetwork};

use super::{
    fidelity::no_hedging,
    harness::{Answer, Harness},
};

/// Diffs in the gateway's log before the escrow starts.
const BEHIND: u64 = 5_000;

/// Diffs the escrow keeps in memory: far fewer than the catch-up needs.
const WINDOW: usize = 64;

/// The diff window, and every catch-up carried by the attempt that needs it: these tests are
/// about an attempt carrying a large one (by default one of more than
/// `reach_background_catch_up_diffs` is a background sync's, `tests/gateway/background.rs`).
fn small_window() -> EscrowConfig {
    EscrowConfig {
        diff_window: WINDOW,
        reach_background_catch_up_diffs: 0,
        ..EscrowConfig::default()
    }
}

/// Diffs read back from the store for `path`.
fn from_store(h: &Harness, path: &str) -> u64 {
    h.metrics.diffs_from_store.with_label_values(&[path]).get()
}

fn sim(seed: &str) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg
}

/// Composes `BEHIND` diffs without inference as the gateway would and appends them to `store`
/// (await the acks).
fn fill_log(
    sim: &SimNetwork,
    info: &EscrowInfo,
    store: &SharedStore,
) -> (Vec<Arc<Diff>>, Vec<Ack>) {
    let mut session = Session::new(Arc::new(info.clone())).unwrap();
    let (mut diffs, mut acks) = (Vec::new(), Vec::new());
    for _ in 0..BEHIND {
        let diff = session.compose(Vec::new(), sim.gateway_key()).unwrap();
        acks.push(store.append_diff(&info.escrow_id, &diff));
        diffs.push(diff);
    }
    (diffs, acks)
}

/// Sends diffs straight to host `index`, as another gateway would have (chunks of 200).
fn feed(
    sim: &SimNetwork,
    info: &EscrowInfo,
    index: usize,
) -> impl FnOnce(Vec<Arc<Diff>>) -> futures::future::LocalBoxFuture<'static, ()> {
    let url = sim.session_url(index, &info.escrow_id).unwrap() + "/chat/completions";
    let signer = RequestSigner::new(
        Arc::new(sim.gateway_key().clone()),
        &info.escrow_id,
        devshard_actors::clock::TokioClock::new().shared(),
    );
    move |diffs| {
        Box::pin(async move {
            for part in diffs.chunks(200) {
                let request = InferenceRequest {
                    diffs: part.iter().map(|d| DiffJson::from_diff(d)).collect(),
                    nonce: part.last().unwrap().nonce,
                    payload: None,
                    stream: None,
                };
                client::send_diffs(&url, &request, &signer, Duration::from_secs(30))
                    .await
                    .unwrap();
            }
        })
    }
}

/// The simulator index of the host that executes `nonce`.
fn executor(sim: &SimNetwork, info: &EscrowInfo, nonce: u64) -> (usize, Address) {
    let addr = info.host_for_nonce(nonce).unwrap().address.clone();
    let index = sim.hosts().iter().position(|h| h.address == addr).unwrap();
    (index, addr)
}

fn fault_free(record: &devshard_actors::participant::record::ParticipantRecord) -> bool {
    !record.outcomes.contains_key(&OutcomeClass::HostFault)
}

/// A gateway whose log holds `BEHIND` diffs no host saw, with the next nonce's executor on a
/// link of 2 s round trips: the harness, that host's simulator index and address.
async fn far_behind_on_a_slow_link(seed: &str) -> (Harness, usize, Address) {
    let store: SharedStore = Arc::new(MemoryStore::new());
    let filled = store.clone();
    let h = Harness::start_mapped(sim(seed), store, small_window(), |sim, info| {
        let (_, acks) = fill_log(sim, &info, &filled);
        async move {
            for ack in acks {
                ack.await.unwrap();
            }
            info
        }
    })
    .await;
    no_hedging(&h).await;
    let info = super::harness::escrow_info(&h.sim, "42");
    let (index, addr) = executor(&h.sim, &info, BEHIND + 1);
    let slow = LatencyProfile {
        rtt_ms: 2_000,
        ..LatencyProfile::zero()
    };
    h.sim.set_latency(index, slow).unwrap();
    (h, index, addr)
}

/// Catch-up chunks of attempts with `result`.
fn attempt_chunks(h: &Harness, result: &str) -> u64 {
    h.metrics
        .catch_up_chunks
        .with_label_values(&["attempt", result])
        .get()
}

/// Seed long-1: hosts restarted empty 74 000 to 165 000 nonces behind had their whole catch-up
/// read from the store and encoded when each attempt was granted (and at every repair tick),
/// and the gateway grew to 10.9 GB. Now the part below the window is read one chunk at a time
/// as it is sent: three chunks into a catch-up of 5 000 diffs, at most five chunks' worth has
/// left the store (the chunk in flight and the request's own inline chunk).
#[actix_rt::test]
async fn seed_long_1_a_far_host_s_catch_up_is_read_from_the_store_chunk_by_chunk_as_it_is_sent() {
    tokio::time::pause();
    let (h, index, _) = far_behind_on_a_slow_link("far-behind-lazy").await;
    let chat = h.chat(Harness::body("after a long absence", false));
    let watch = async {
        while attempt_chunks(&h, "ok") < 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        from_store(&h, "attempt")
    };
    let (a, read_early) = futures::join!(chat, watch);
    assert!(matches!(a, Answer::Whole(_)), "{a:?}");
    let chunk = EscrowConfig::default().catch_up_chunk as u64;
    assert!(
        read_early <= 5 * chunk,
        "three chunks in, {read_early} diffs had been read from the store"
    );
    assert!(
        from_store(&h, "attempt") >= BEHIND - WINDOW as u64,
        "by the end every diff below the window came from the store: {}",
        from_store(&h, "attempt")
    );
    let view = h.sim.host_view(index, "42").unwrap();
    assert_eq!(view.latest_nonce, BEHIND + 1, "the host holds every diff");
}

#[actix_rt::test]
async fn a_host_5000_diffs_behind_on_a_slow_link_catches_up_with_no_401() {
    tokio::time::pause();
    let (h, index, addr) = far_behind_on_a_slow_link("far-behind").await;
    let nonce = BEHIND + 1;
    let start = tokio::time::Instant::now();
    let a = h.chat(Harness::body("after a long absence", false)).await;
    assert!(matches!(a, Answer::Whole(_)), "{a:?}");
    let took = start.elapsed();
    assert!(
        took > Duration::from_secs(40),
        "the catch-up outlasts the 30 s drift window ({took:?}), so it proves something"
    );
    assert_eq!(
        h.snapshot("42").await.nonce,
        nonce,
        "served on its first host"
    );
    let view = h.sim.host_view(index, "42").unwrap();
    assert_eq!(view.latest_nonce, nonce, "the host holds every diff");
    assert_eq!(attempt_chunks(&h, "auth_rejected"), 0, "no 401 drift");
    let ok = attempt_chunks(&h, "ok");
    assert!(ok >= BEHIND / 200 - 1, "{ok}");
    assert!(fault_free(&h.participant(&addr).await));
    assert!(
        from_store(&h, "attempt") >= BEHIND - WINDOW as u64,
        "the diffs below the window came from the store: {}",
        from_store(&h, "attempt")
    );
}

#[actix_rt::test]
async fn a_nonce_gap_sends_the_same_nonce_again_from_what_the_host_holds() {
    tokio::time::pause();
    const HOLDS: u64 = 3_000;
    let store: SharedStore = Arc::new(MemoryStore::new());
    let filled = store.clone();
    let h = Harness::start_mapped(sim("nonce-gap"), store, small_window(), |sim, info| {
        let store = filled.clone();
        let (diffs, acks) = fill_log(sim, &info, &store);
        // The executor of the next nonce got the first HOLDS diffs; our persisted sync point
        // says it has them all (as after the host rolled back to an older snapshot).
        let (index, addr) = executor(sim, &info, BEHIND + 1);
        let feed = feed(sim, &info, index);
        async move {
            for ack in acks {
                ack.await.unwrap();
            }
            feed(diffs[..HOLDS as usize].to_vec()).await;
            let record = serde_json::json!({ "host_sync": { addr.to_string(): BEHIND } });
            store
                .put(ns::SESSIONS, &info.escrow_id, record)
                .await
                .unwrap();
            info
        }
    })
    .await;
    no_hedging(&h).await;
    let info = super::harness::escrow_info(&h.sim, "42");
    let (index, addr) = executor(&h.sim, &info, BEHIND + 1);
    assert_eq!(h.sim.host_view(index, "42").unwrap().latest_nonce, HOLDS);
    let a = h.chat(Harness::body("the host rolled back", false)).await;
    assert!(matches!(a, Answer::Whole(_)), "{a:?}");
    assert_eq!(
        h.snapshot("42").await.nonce,
        BEHIND + 1,
        "served on its first host: the gap sent the same nonce again"
    );
    let synced = |snap: &devshard_actors::escrow::messages::EscrowSnapshot| {
        snap.host_sync
            .iter()
            .find(|(a, _)| *a == addr.to_string())
            .map(|(_, n)| *n)
    };
    assert_eq!(
        synced(&h.snapshot("42").await),
        Some(BEHIND + 1),
        "the resend caught the host up from what it holds"
    );
    let resends = |r: &str| h.metrics.gap_resends.with_label_values(&[r]).get();
    assert_eq!((resends("ok"), resends("failed")), (1, 0));
    let diffs = h.metrics.catch_up_diffs.with_label_values(&["resend"]);
    assert_eq!(diffs.get_sample_count(), 1);
    assert_eq!(
        diffs.get_sample_sum() as u64,
        BEHIND + 1 - HOLDS,
        "the resend carried every diff above what the host holds, not from nonce 1"
    );
    let rewinds = |cause: &str| {
        h.metrics
            .host_sync_rewinds
            .with_label_values(&[cause])
            .get()
    };
    assert_eq!((rewinds("nonce_gap"), rewinds("session_lost")), (0, 0));
    assert!(fault_free(&h.participant(&addr).await));
    let view = h.sim.host_view(index, "42").unwrap();
    assert_eq!(view.latest_nonce, BEHIND + 1);
    assert!(from_store(&h, "resend") >= BEHIND - HOLDS - WINDOW as u64);
}

/// The hour-long run (2026-12-04): after each restart of the gateway, a host's catch-up started
/// from its persisted sync point, which lagged what the host held (tens of thousands of diffs),
/// and every diff it already held was sent again and skipped. A host that answers a chunk with
/// a nonce beyond it is now skipped forward (upstream's `sendCatchUp`): one host holding all
/// 5 000 diffs while the gateway's sync point says 0 is synced in at most two chunks, not 25.
#[actix_rt::test]
async fn a_sync_skips_forward_past_what_the_host_says_it_holds() {
    tokio::time::pause();
    let mut one = sim("skip-forward");
    one.hosts = 1;
    let store: SharedStore = Arc::new(MemoryStore::new());
    let filled = store.clone();
    let h = Harness::start_mapped(one, store, small_window(), |sim, info| {
        let (diffs, acks) = fill_log(sim, &info, &filled);
        let feed = feed(sim, &info, 0);
        async move {
            for ack in acks {
                ack.await.unwrap();
            }
            feed(diffs).await;
            info
        }
    })
    .await;
    assert_eq!(h.sim.host_view(0, "42").unwrap().latest_nonce, BEHIND);
    let chunks = || {
        ["ok", "failed"]
            .iter()
            .map(|r| {
                h.metrics
                    .catch_up_chunks
                    .with_label_values(&["sync", r])
                    .get()
            })
            .sum::<u64>()
    };
    let escrow = h.escrow_addr("42").await;
    let synced = escrow
        .send(devshard_actors::escrow::messages::SyncHosts)
        .await
        .unwrap();
    assert!(
        synced.iter().all(|(_, n)| *n >= BEHIND),
        "the host is known to hold every diff: {synced:?}"
    );
    assert!(
        chunks() <= 2,
        "{} chunks sent for a host that held them",
        chunks()
    );
}
