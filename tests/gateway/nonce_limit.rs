//! Finding of the hour-long chaos run (seed `long-1`): near its nonce limit the escrow had about
//! 2 000 inferences open (refused attempts awaiting their timeout votes) and went on composing
//! their timeout diffs 2 150 nonces past `max_nonce − (N + 1)`. Every host refused those diffs
//! ("nonce exceeds chain max_nonce limit"), then the finalize round with them: the escrow could
//! never collect its signatures and settle. Now every inference that starts leaves a nonce for
//! each open inference's settlement and one for the finalize round (`escrow/nonce_room.rs`), and
//! no diff but the finalize round may take the last active nonce.
//!
//! Here, in paused time over real loopback HTTP: hosts whose first token comes at three
//! different delays keep a dozen inferences open at once, so their finishes arrive one by one
//! and each is sequenced on a diff of its own once no start takes it. Requests run the escrow to
//! its limit, then it drains and finalizes: every host accepted every diff and reached
//! Settlement, at a finalize nonce no later than the last active nonce.

use std::{sync::Arc, time::Duration};

use devshard_actors::{
    escrow::{
        messages::{BeginDrain, FinalizeRound},
        EscrowConfig,
    },
    protocol::state::{Phase, SessionConfig},
    store::MemoryStore,
};
use devshard_gateway::sim::{LatencyProfile, Profile, SimConfig};
use futures::future::join_all;

use super::harness::{escrow_info, Harness};

const HOSTS: usize = 3;
const MAX_NONCE: u64 = 60;

fn sim() -> SimConfig {
    let mut cfg = SimConfig::with_seed("nonce-room");
    cfg.hosts = HOSTS;
    cfg.max_nonce = MAX_NONCE;
    cfg.session_config = Some(SessionConfig::default_for_group(HOSTS));
    let host = |ttft_ms| LatencyProfile {
        ttft_ms,
        tokens_per_s: 0.0,
        ..LatencyProfile::zero()
    };
    cfg.profile = Profile::Custom(vec![host(1_000), host(1_700), host(2_300)]);
    cfg
}

#[actix_rt::test]
async fn hour_long_run_open_inferences_at_the_nonce_limit_never_pass_the_last_active_nonce() {
    tokio::time::pause();
    // A finish is sequenced on its own diff 200 ms after it arrived when no start took it.
    let escrow_cfg = EscrowConfig {
        finish_poll_initial_ms: 200,
        ..EscrowConfig::default()
    };
    // The harness registers escrows as the chain reports them; `max_nonce` as this chain's.
    let h = Harness::start_mapped(
        sim(),
        Arc::new(MemoryStore::new()),
        escrow_cfg,
        |_, info| {
            let mut info = info;
            info.max_nonce = MAX_NONCE;
            async move { info }
        },
    )
    .await;
    let mut info = escrow_info(&h.sim, "42");
    info.max_nonce = MAX_NONCE;
    let last_active = info.last_active_nonce();
    assert_eq!(last_active, MAX_NONCE - (HOSTS as u64 + 1));

    // Twelve clients until the escrow refuses them (its nonce limit).
    let client = |i: usize| {
        let h = &h;
        async move {
            let mut served = 0u32;
            for n in 0..40 {
                let body = Harness::body(&format!("client {i} request {n}"), n % 2 == 0);
                if !h.chat(body).await.is_success() {
                    break;
                }
                served += 1;
            }
            served
        }
    };
    let served: u32 = join_all((0..12).map(client)).await.into_iter().sum();
    assert!(served > 20, "the escrow served until its limit: {served}");
    // Every finish arrives and is sequenced.
    tokio::time::sleep(Duration::from_secs(30)).await;

    let escrow = h.escrow_addr("42").await;
    for _ in 0..100 {
        let p = escrow.send(BeginDrain).await.unwrap();
        if p.unsettled == 0 && p.waiting == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for _ in 0..=HOSTS {
        escrow.send(FinalizeRound).await.unwrap().unwrap();
    }
    let snap = h.snapshot("42").await;
    assert_eq!(snap.phase, "settlement", "{snap:?}");
    for i in 0..HOSTS {
        let view = h.sim.host_view(i, "42").unwrap();
        assert_eq!(
            (view.state.latest_nonce(), view.state.phase()),
            (snap.nonce, Phase::Settlement),
            "host {i} holds every diff the gateway composed"
        );
        assert!(
            view.state.finalize_nonce() <= last_active,
            "finalize round at {} past the last active nonce {last_active}",
            view.state.finalize_nonce()
        );
    }
}
