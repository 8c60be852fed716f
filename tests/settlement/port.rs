//! A test escrow for the settlement actor: the sim test client's session (its own state
//! machine and signed diffs) sent to the simulated hosts over real HTTP. Each finalize round is
//! one payload-less diff to its host with catch-up, as the gateway's escrow sends it.

use std::{cell::RefCell, collections::BTreeMap, rc::Rc};

use devshard_actors::{
    escrow::{EscrowInfo, HostEndpoint},
    protocol::{
        auth::{sign_request, HEADER_SIGNATURE, HEADER_TIMESTAMP},
        crypto::Address,
        proto::{DevshardTx, MsgFinalizeRound, Tx},
        state::{Phase, Slot},
    },
    settlement::port::{EscrowSteps, FinalState, RoundDone, StepError},
};
use futures::future::LocalBoxFuture;

use crate::client::{Session, TestNet};

/// The session shared by the test and the port.
#[derive(Clone)]
pub struct TestEscrow {
    pub session: Rc<RefCell<Session>>,
    /// Hosts charged for an invalid final-state signature, in order.
    pub charged: Rc<RefCell<Vec<Address>>>,
}

/// Our view of the simulated escrow.
pub fn escrow_info(net: &TestNet, id: &str) -> EscrowInfo {
    let chain = net.escrow(id).unwrap();
    let group: Vec<Slot> = chain
        .slots
        .iter()
        .enumerate()
        .map(|(i, a)| Slot {
            slot_id: i as u32,
            validator: a.clone(),
        })
        .collect();
    let mut hosts: Vec<HostEndpoint> = Vec::new();
    for (i, addr) in chain.slots.iter().enumerate() {
        if let Some(h) = hosts.iter_mut().find(|h| &h.address == addr) {
            h.slots.push(i as u32);
            continue;
        }
        let url = net
            .hosts()
            .iter()
            .find(|h| &h.address == addr)
            .unwrap()
            .url
            .clone();
        hosts.push(HostEndpoint {
            address: addr.clone(),
            base_url: url,
            slots: vec![i as u32],
            weight: 1,
        });
    }
    EscrowInfo {
        escrow_id: id.to_owned(),
        creator: chain.creator.clone(),
        model: net.config().model.clone(),
        amount: chain.amount,
        config: chain.session_config.clone(),
        group,
        hosts,
        max_nonce: chain.max_nonce,
        route_prefix: net.config().route_prefix.clone(),
    }
}

/// POSTs every diff to host `host` (payload-less) and reports whether it answered 200.
async fn send_all(session: &Rc<RefCell<Session>>, host: usize) -> Result<(), StepError> {
    let (url, body, auth) = {
        let s = session.borrow();
        let nonce = s.sm.latest_nonce();
        let body = Session::body(s.diffs_after(0), nonce, None);
        let auth = sign_request(&s.key, &s.escrow_id, &body, s.now() as u64);
        (format!("{}/chat/completions", s.urls[host]), body, auth)
    };
    let client = session.borrow().client.clone();
    let resp = client
        .post(url)
        .insert_header((HEADER_SIGNATURE, auth.signature_hex))
        .insert_header((HEADER_TIMESTAMP, auth.timestamp))
        .insert_header(("content-type", "application/json"))
        .send_body(body)
        .await
        .map_err(|e| StepError::NotReady(e.to_string()))?;
    if resp.status().as_u16() == 200 {
        Ok(())
    } else {
        Err(StepError::Failed(format!(
            "host {host} answered {}",
            resp.status()
        )))
    }
}

impl EscrowSteps for TestEscrow {
    fn drain(&self) -> LocalBoxFuture<'static, Result<(), StepError>> {
        Box::pin(async { Ok(()) })
    }

    fn finalize_round(&self) -> LocalBoxFuture<'static, Result<RoundDone, StepError>> {
        let session = Rc::clone(&self.session);
        Box::pin(async move {
            let host = {
                let mut s = session.borrow_mut();
                if s.sm.phase() != Phase::Settlement {
                    let txs = if s.sm.phase() == Phase::Active {
                        vec![DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {}))]
                    } else {
                        Vec::new()
                    };
                    s.compose(txs);
                }
                s.executor(s.sm.latest_nonce())
            };
            // A dead host is skipped, as upstream's sendDiffRound does.
            let _ = send_all(&session, host).await;
            let s = session.borrow();
            Ok(RoundDone {
                nonce: s.sm.latest_nonce(),
                phase: s.sm.phase(),
                finalize_nonce: s.sm.finalize_nonce(),
            })
        })
    }

    fn final_state(&self) -> LocalBoxFuture<'static, Result<FinalState, StepError>> {
        let state = self.session.borrow().sm.clone();
        Box::pin(async move {
            Ok(FinalState {
                state,
                signatures: BTreeMap::new(),
            })
        })
    }

    fn catch_up(&self, host: Address) -> LocalBoxFuture<'static, Result<(), StepError>> {
        let session = Rc::clone(&self.session);
        Box::pin(async move {
            let index = {
                let s = session.borrow();
                let slot = s.sm.slots_of(&host).first().copied();
                slot.map(|sl| s.slot_host[sl as usize])
            };
            match index {
                Some(i) => send_all(&session, i).await,
                None => Err(StepError::Failed(format!("{host} is not in the group"))),
            }
        })
    }

    /// The test session knows no grants: a warm signer stays unresolved.
    fn check_warm_key(
        &self,
        _validator: Address,
        _warm: Address,
    ) -> LocalBoxFuture<'static, Result<(), StepError>> {
        Box::pin(async { Ok(()) })
    }

    fn charge_invalid_signature(
        &self,
        host: Address,
    ) -> LocalBoxFuture<'static, Result<(), StepError>> {
        self.charged.borrow_mut().push(host);
        Box::pin(async { Ok(()) })
    }
}
