//! `kill -9` of the real gateway binary at each settlement step, then a restart on the same data
//! directory: every escrow ends settled, and the chain saw exactly one settlement tx per escrow.

use std::time::Duration;

use devshard_actors::clock::TokioClock;
use devshard_gateway::sim::{EscrowStatus, Faults, Profile, SimConfig, SimNetwork, TxFaults};

use super::child::{free_port, temp_dir, Gateway};

async fn settlement(gw: &Gateway, id: &str) -> serde_json::Value {
    gw.admin("GET", &format!("/v1/admin/escrows/{id}/settlement"))
        .await
}

/// Polls until the record's state is one of `states` (bounded).
async fn wait_state(gw: &Gateway, id: &str, states: &[&str]) -> serde_json::Value {
    for _ in 0..400 {
        let r = settlement(gw, id).await;
        if states.iter().any(|s| r["state"] == *s) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{id} never reached {states:?}: {}",
        settlement(gw, id).await
    );
}

#[actix_rt::test]
async fn sigkill_at_each_settlement_step_still_settles_once() {
    let mut cfg = SimConfig::with_seed("settle-crash");
    cfg.hosts = 4;
    cfg.profile = Profile::Zero;
    cfg.escrow_ids = ["42", "43", "44", "45"].map(String::from).to_vec();
    let sim = SimNetwork::start(cfg, TokioClock::new().shared())
        .await
        .unwrap();
    let dir = temp_dir("settle-crash");
    let port = free_port();
    let escrows = ["42", "43", "44", "45"];
    let mut gw = Gateway::start(&sim, &dir, port, &escrows).await;
    for _ in 0..20 {
        gw.chat("pay the hosts", false).await.unwrap();
    }

    // 42: killed right after the 202 (draining or finalizing).
    gw.admin("POST", "/v1/admin/escrows/42/settle").await;
    gw.kill9();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    // 43: killed while collecting (2 of 4 hosts give no signature: weight 2 < 3).
    let down = Faults {
        withhold_state_sig: true,
        signatures_empty: true,
        ..Faults::default()
    };
    sim.set_faults(1, down.clone()).unwrap();
    sim.set_faults(2, down).unwrap();
    gw.admin("POST", "/v1/admin/escrows/43/settle").await;
    let r = wait_state(&gw, "43", &["retrying"]).await;
    assert_eq!(r["weight"], 2, "{r}");
    gw.kill9();
    sim.clear_all_faults();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    // 44: killed after the broadcast, before the commit.
    sim.set_tx_faults(TxFaults {
        commit_delay_ms: 4_000,
        ..TxFaults::default()
    });
    gw.admin("POST", "/v1/admin/escrows/44/settle").await;
    wait_state(&gw, "44", &["broadcast"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    gw.kill9();
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    // 45: killed after the confirmation.
    gw.admin("POST", "/v1/admin/escrows/45/settle").await;
    wait_state(&gw, "45", &["settled"]).await;
    gw.kill9();
    sim.set_tx_faults(TxFaults::default());
    gw = Gateway::start(&sim, &dir, port, &escrows).await;

    for id in escrows {
        let r = wait_state(&gw, id, &["settled"]).await;
        assert!(
            matches!(sim.escrow_status(id), Some(EscrowStatus::Settled { .. })),
            "{id}: {r}"
        );
        assert_eq!(
            sim.settlement_tx_hashes(id).len(),
            1,
            "{id}: one tx seen by the chain: {r}"
        );
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
}
