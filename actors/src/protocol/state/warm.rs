//! Warm-key bindings in the state (docs/lifecycle.md §5): who may sign for a slot, and the binding a
//! chain-granted warm key gets when the diff carrying its signature is applied.
//!
//! - Every signature check of the state machine (receipts, finish, validation and vote proposer
//!   signatures, timeout votes) goes through [`StateMachine::admit`], which runs
//!   [`warm::decide`] with this session's bindings and its resolver.
//! - A `Granted` answer binds the key to the slot when the tx commits (check-first-commit-last:
//!   the binding is returned and written with the tx's other effects). Bindings are sticky.
//! - Replay: [`StateMachine::inject_warm_keys`] restores a diff's stored delta before the diff is
//!   re-applied, so the signatures take the bound path and no chain is asked.
//! - The resolver is not state: two machines with the same bindings are equal whatever resolver
//!   they hold, and a snapshot does not carry it.

use std::{collections::BTreeMap, fmt, sync::Arc};

use crate::protocol::{
    crypto::{recover_address, Address},
    warm::{self, Acceptance, GrantAnswer, NoGrants, SharedResolver, WarmBinding, WarmKeyResolver},
};

use super::{StateError, StateMachine};

/// The resolver of step 4, outside the state's equality.
#[derive(Clone)]
pub(super) struct ResolverSlot(pub(super) SharedResolver);

impl Default for ResolverSlot {
    fn default() -> Self {
        ResolverSlot(Arc::new(NoGrants))
    }
}

impl PartialEq for ResolverSlot {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for ResolverSlot {}

impl fmt::Debug for ResolverSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Which signature is being checked (selects the upstream error text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SigKind {
    Executor,
    Proposer,
    Vote,
}

impl SigKind {
    fn error(self, text: String) -> StateError {
        match self {
            SigKind::Executor => StateError::InvalidExecutorSig(text),
            SigKind::Proposer => StateError::InvalidProposerSig(text),
            SigKind::Vote => StateError::InvalidVoteSig(text),
        }
    }
}

impl StateMachine {
    /// The warm key bound to each slot.
    pub fn warm_keys(&self) -> &BTreeMap<u32, Address> {
        &self.st.warm_keys
    }

    /// `warm_keys_hash` of the current bindings.
    pub fn warm_keys_hash(&self) -> [u8; 32] {
        warm::warm_keys_hash(&self.st.warm_keys)
    }

    /// Uses `resolver` for step 4 from now on (clones share it).
    pub fn set_warm_resolver(&mut self, resolver: SharedResolver) {
        self.warm = ResolverSlot(resolver);
    }

    /// Builder form of [`StateMachine::set_warm_resolver`].
    pub fn with_warm_resolver(mut self, resolver: SharedResolver) -> Self {
        self.set_warm_resolver(resolver);
        self
    }

    /// docs/lifecycle.md §5 with this session's resolver: may `recovered` sign for `slot`?
    pub fn signer_acceptance(&self, slot: u32, recovered: &Address) -> Acceptance {
        self.signer_acceptance_with(slot, recovered, self.warm.0.as_ref())
    }

    /// docs/lifecycle.md §5 with an explicit resolver (the gateway passes its grant cache). A slot
    /// outside the group accepts nobody.
    pub fn signer_acceptance_with(
        &self,
        slot: u32,
        recovered: &Address,
        resolver: &dyn WarmKeyResolver,
    ) -> Acceptance {
        let Some(cold) = self.slot_address(slot) else {
            return Acceptance::Rejected(warm::Rejection::NotGranted);
        };
        let bound = self.st.warm_keys.get(&slot);
        let sibling = self
            .st
            .warm_keys
            .iter()
            .any(|(s, a)| *s != slot && a == recovered && self.slot_address(*s) == Some(cold));
        warm::decide(cold, bound, sibling, recovered, || {
            resolver.resolve(cold, recovered)
        })
    }

    /// The same question for a host address rather than a slot (state signatures): the cold
    /// key, a warm key bound to any slot of `validator`, or the resolver. Binds nothing.
    pub fn address_acceptance_with(
        &self,
        validator: &Address,
        recovered: &Address,
        resolver: &dyn WarmKeyResolver,
    ) -> Acceptance {
        if recovered == validator {
            return Acceptance::Cold;
        }
        let bound_here = self
            .st
            .warm_keys
            .iter()
            .any(|(s, a)| a == recovered && self.slot_address(*s) == Some(validator));
        if bound_here {
            return Acceptance::Bound;
        }
        match resolver.resolve(validator, recovered) {
            GrantAnswer::Granted => Acceptance::Granted,
            GrantAnswer::NotGranted => Acceptance::Rejected(warm::Rejection::NotGranted),
            GrantAnswer::Unknown => Acceptance::Unresolved,
        }
    }

    /// [`StateMachine::address_acceptance_with`] with this session's resolver (the gateway's
    /// grant cache on the escrow's machine and its clones): the final-state signatures of a
    /// settlement are judged with it.
    pub fn address_acceptance(&self, validator: &Address, recovered: &Address) -> Acceptance {
        self.address_acceptance_with(validator, recovered, self.warm.0.as_ref())
    }

    /// Recovers `sig` over `message` and admits the signer for `slot`; `Ok(Some(binding))` when
    /// the signer is a newly granted warm key (to be committed with the tx).
    pub(super) fn admit(
        &self,
        kind: SigKind,
        slot: u32,
        message: &[u8],
        sig: &[u8],
    ) -> Result<Option<WarmBinding>, StateError> {
        let recovered = recover_address(message, sig).map_err(|e| kind.error(e.to_string()))?;
        let expected = self.slot_owner(slot)?;
        match self.signer_acceptance(slot, &recovered) {
            Acceptance::Granted => Ok(Some(WarmBinding {
                slot,
                address: recovered,
            })),
            Acceptance::Cold | Acceptance::Bound | Acceptance::Sibling => Ok(None),
            Acceptance::Unresolved => Err(StateError::WarmKeyUnresolved {
                slot,
                address: recovered.to_string(),
            }),
            Acceptance::Rejected(why) => Err(kind.error(format!(
                "expected {expected} (slot {slot}), got {recovered}: {why}"
            ))),
        }
    }

    /// Commits bindings admitted by a tx (a slot already bound keeps its key).
    pub(super) fn bind_warm(&mut self, bindings: impl IntoIterator<Item = WarmBinding>) {
        let mut bindings = bindings.into_iter().peekable();
        if bindings.peek().is_none() {
            return;
        }
        let keys = Arc::make_mut(&mut self.st.warm_keys);
        for b in bindings {
            keys.entry(b.slot).or_insert(b.address);
        }
    }

    /// Restores a stored warm-key delta before its diff is replayed. Never overwrites a binding;
    /// slots outside the group are an error (the delta does not belong to this session).
    pub fn inject_warm_keys(&mut self, delta: &[WarmBinding]) -> Result<(), StateError> {
        if let Some(bad) = delta.iter().find(|b| self.slot_address(b.slot).is_none()) {
            return Err(StateError::SlotNotInGroup(bad.slot));
        }
        self.bind_warm(delta.iter().cloned());
        Ok(())
    }
}
