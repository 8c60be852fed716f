//! Warm keys at the session's verification sites (LIFECYCLE.md §5).
//!
//! Every signature a host makes is judged by the state machine's one acceptance rule
//! ([`StateMachine::signer_acceptance_with`] for a slot, [`StateMachine::address_acceptance_with`]
//! for a host address), with the gateway's grant cache as step 4. The cache never blocks: a key
//! it has no answer for is [`Acceptance::Unresolved`], which is never the host's fault. The actor
//! asks the chain first ([`Session::signers_to_check`], then `WarmKeyChecker::check`) and judges
//! after, so a check that failed or was slow holds the signature instead of striking the host.

use crate::protocol::{
    crypto::{recover_address, Address},
    proto::{self, DevshardTx, Tx},
    state,
    warm::{Acceptance, SharedResolver, WarmBinding},
    wire::ReceiptBody,
};

use super::{Session, SessionError};

/// A signer that is neither the cold key nor a bound key: what the chain must be asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmSigner {
    pub validator: Address,
    pub warm: Address,
    /// What the cache says now (`Unresolved` = ask the chain, `Rejected` = known bad).
    pub acceptance: Acceptance,
}

/// Why a signature was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SignerError {
    /// Not a signature of anyone allowed (the text says why).
    Invalid(String),
    /// A warm key whose grant is not known yet.
    Unresolved { validator: Address, warm: Address },
}

impl SignerError {
    /// Maps to the session error of the site, keeping "unresolved" typed.
    pub(crate) fn into_session(self, invalid: impl FnOnce(String) -> SessionError) -> SessionError {
        match self {
            SignerError::Invalid(text) => invalid(text),
            SignerError::Unresolved { validator, warm } => {
                SessionError::WarmKeyUnresolved { validator, warm }
            }
        }
    }
}

fn judge(acceptance: Acceptance, who: &Address, recovered: Address) -> Result<(), SignerError> {
    match acceptance {
        Acceptance::Cold | Acceptance::Bound | Acceptance::Sibling | Acceptance::Granted => Ok(()),
        Acceptance::Unresolved => Err(SignerError::Unresolved {
            validator: who.clone(),
            warm: recovered,
        }),
        Acceptance::Rejected(why) => Err(SignerError::Invalid(format!(
            "signature recovers to {recovered}, not {who} nor a key it granted: {why}"
        ))),
    }
}

impl Session {
    /// Uses `grants` (the gateway's grant cache) as step 4 of the acceptance rule, for the
    /// verification sites and for the state machine's own checks at composition.
    pub fn with_grants(mut self, grants: SharedResolver) -> Session {
        self.sm.set_warm_resolver(grants.clone());
        self.grants = grants;
        self
    }

    /// The warm keys bound in the state, by slot.
    pub fn warm_keys(&self) -> &std::collections::BTreeMap<u32, Address> {
        self.sm.warm_keys()
    }

    /// The warm keys the last composed diff bound (stored with it).
    pub fn last_warm_delta(&self) -> &[WarmBinding] {
        &self.last_warm_delta
    }

    fn slot_acceptance(&self, slot: u32, recovered: &Address) -> Acceptance {
        self.sm
            .signer_acceptance_with(slot, recovered, self.grants.as_ref())
    }

    /// May the signer of `sig` over `message` sign for `slot`?
    pub(crate) fn check_slot_signer(
        &self,
        slot: u32,
        message: &[u8],
        sig: &[u8],
    ) -> Result<(), SignerError> {
        let recovered =
            recover_address(message, sig).map_err(|e| SignerError::Invalid(e.to_string()))?;
        let owner = self
            .sm
            .slot_address(slot)
            .ok_or_else(|| SignerError::Invalid(format!("slot {slot} is not in the group")))?;
        judge(self.slot_acceptance(slot, &recovered), owner, recovered)
    }

    /// May the signer of `sig` over `message` sign for host `host` (state signatures)?
    pub(crate) fn check_host_signer(
        &self,
        host: &Address,
        message: &[u8],
        sig: &[u8],
    ) -> Result<(), SignerError> {
        let recovered =
            recover_address(message, sig).map_err(|e| SignerError::Invalid(e.to_string()))?;
        let acceptance = self
            .sm
            .address_acceptance_with(host, &recovered, self.grants.as_ref());
        judge(acceptance, host, recovered)
    }

    /// The warm signers of a receipt event (state signature and executor receipt) that are not
    /// the cold key nor a bound key, with what the cache says of them.
    pub fn signers_to_check(
        &self,
        host: &Address,
        inference_nonce: Option<u64>,
        body: &ReceiptBody,
    ) -> Vec<WarmSigner> {
        let mut out = Vec::new();
        if let (Some(hash), Some(sig)) = (body.state_hash.as_ref(), body.state_sig.as_ref()) {
            let content = state::state_sig_content(hash, &self.info.escrow_id, body.nonce);
            if let Ok(recovered) = recover_address(&content, sig) {
                let a = self
                    .sm
                    .address_acceptance_with(host, &recovered, self.grants.as_ref());
                push(&mut out, host, recovered, a);
            }
        }
        let receipt = inference_nonce.zip(body.receipt.as_ref());
        if let Some((nonce, receipt)) = receipt {
            if let (Some(start), Some(slot)) =
                (self.start_of(nonce), self.info.slot_for_nonce(nonce))
            {
                let content = state::receipt_content(
                    &start,
                    &self.info.escrow_id,
                    body.confirmed_at.unwrap_or(0),
                );
                if let Ok(recovered) = recover_address(&proto::encode(&content), receipt) {
                    let a = self.slot_acceptance(slot.slot_id, &recovered);
                    push(&mut out, &slot.validator, recovered, a);
                }
            }
        }
        out
    }

    /// The warm signer of a state signature fetched for our root at `nonce`.
    pub fn fetched_signer_to_check(
        &self,
        host: &Address,
        nonce: u64,
        sig: &[u8],
    ) -> Option<WarmSigner> {
        let root = self.expected_root(nonce)?;
        let content = state::state_sig_content(&root, &self.info.escrow_id, nonce);
        let recovered = recover_address(&content, sig).ok()?;
        let a = self
            .sm
            .address_acceptance_with(host, &recovered, self.grants.as_ref());
        let mut out = Vec::new();
        push(&mut out, host, recovered, a);
        out.pop()
    }

    /// The warm signers of the finish markers in a mempool, as [`Session::signers_to_check`].
    pub fn mempool_signers_to_check(&self, txs: &[DevshardTx]) -> Vec<WarmSigner> {
        let mut out = Vec::new();
        for tx in txs {
            let Some(Tx::FinishInference(f)) = &tx.tx else {
                continue;
            };
            let Some(owner) = self.sm.slot_address(f.executor_slot) else {
                continue;
            };
            if let Ok(recovered) =
                recover_address(&state::finish_unsigned_bytes(f), &f.proposer_sig)
            {
                let a = self.slot_acceptance(f.executor_slot, &recovered);
                push(&mut out, owner, recovered, a);
            }
        }
        out
    }

    /// The warm signer of a timeout vote for `slot`, as [`Session::signers_to_check`].
    pub fn vote_signer_to_check(
        &self,
        slot: u32,
        content: &[u8],
        sig: &[u8],
    ) -> Option<WarmSigner> {
        let owner = self.sm.slot_address(slot)?;
        let recovered = recover_address(content, sig).ok()?;
        let a = self.slot_acceptance(slot, &recovered);
        let mut out = Vec::new();
        push(&mut out, owner, recovered, a);
        out.pop()
    }
}

fn push(out: &mut Vec<WarmSigner>, owner: &Address, recovered: Address, acceptance: Acceptance) {
    if matches!(
        acceptance,
        Acceptance::Cold | Acceptance::Bound | Acceptance::Sibling
    ) {
        return;
    }
    let signer = WarmSigner {
        validator: owner.clone(),
        warm: recovered,
        acceptance,
    };
    if !out.contains(&signer) {
        out.push(signer);
    }
}
