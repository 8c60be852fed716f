//! The simulated network on a thread of its own. The runner's one thread drives 100 client
//! loops, the checks and the schedule; with the simulator's servers on it too, every host's
//! answer (and every verifier's answer to a timeout vote) waited behind the load's own work,
//! as in run J (seed `long-1`, 1 729 s: a vote backlog, requests at 1.1–1.5 s, the recovery
//! probe queued). Here the simulator gets its own current-thread runtime (its crypto still goes
//! to that runtime's blocking pool); the runner talks to it over HTTP only, as before.

use std::{sync::mpsc, thread::JoinHandle};

use devshard_actors::clock::TokioClock;
use tokio::sync::oneshot;

use crate::sim::{SimConfig, SimNetwork};

/// What the runner needs of a simulator that runs elsewhere.
pub struct SimThread {
    pub gateway_key_hex: String,
    pub chain_url: String,
    pub control_url: String,
    pub config: SimConfig,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl SimThread {
    /// Starts the simulator on a new thread and waits until its servers are bound.
    pub fn start(cfg: SimConfig) -> Result<SimThread, String> {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("chaos-sim".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("simulator runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    match SimNetwork::start(cfg, TokioClock::new().shared()).await {
                        Ok(sim) => {
                            let _ = ready_tx.send(Ok((
                                sim.gateway_key().secret_hex(),
                                sim.chain_url().to_owned(),
                                sim.control_url().to_owned(),
                                sim.config().clone(),
                            )));
                            let _ = stop_rx.await;
                            drop(sim);
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(format!("simulator: {e}")));
                        }
                    }
                });
            })
            .map_err(|e| format!("simulator thread: {e}"))?;
        let (gateway_key_hex, chain_url, control_url, config) = ready_rx
            .recv()
            .map_err(|_| "the simulator thread ended before it started".to_string())??;
        Ok(SimThread {
            gateway_key_hex,
            chain_url,
            control_url,
            config,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for SimThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
