//! The chain side of [`SimNetwork`]'s Rust API: request counters and faults of the chain API,
//! escrows, balances, settlement and creation records, tx faults, epochs and warm-key grants.

use devshard_actors::protocol::crypto::Address;

use super::{SimError, SimNetwork};
use crate::sim::{
    chain::EscrowInfo,
    epoch::EpochView,
    ledger::{EscrowStatus, TxFaults, SIM_CHAIN_ID},
    traffic::{ChainFaults, ChainRequests},
    warm::{self, Grant, GrantsFault},
};

impl SimNetwork {
    pub fn chain_requests(&self) -> ChainRequests {
        self.core.chain.requests()
    }

    /// Replaces the chain API's faults (see [`ChainFaults`]).
    pub fn set_chain_faults(&self, faults: ChainFaults) {
        self.core.chain.set_faults(faults);
    }

    pub fn clear_chain_faults(&self) {
        self.core.chain.set_faults(ChainFaults::default());
    }

    pub fn reset_chain_requests(&self) {
        self.core.chain.reset_requests();
    }

    /// The chain's record of an escrow.
    pub fn escrow(&self, id: &str) -> Option<EscrowInfo> {
        self.core.chain.escrow(id)
    }

    /// Every escrow the chain holds, configured or created, by id.
    pub fn escrow_ids(&self) -> Vec<String> {
        self.core.chain.ledger().escrows.keys().cloned().collect()
    }

    /// The escrows created by `MsgCreateDevshardEscrow`: tx hash → escrow id. A gateway that
    /// never funds twice shows one entry per creation it meant.
    pub fn created_escrows(&self) -> std::collections::BTreeMap<String, String> {
        self.core.chain.ledger().creation.by_tx.clone()
    }

    /// The chain id every SignDoc must name.
    pub fn chain_id(&self) -> &'static str {
        SIM_CHAIN_ID
    }

    /// Spendable balance of an account on the chain.
    pub fn balance(&self, address: &Address) -> u64 {
        self.core.chain.ledger().balance(address)
    }

    /// Where an escrow's deposit stands on the chain.
    pub fn escrow_status(&self, id: &str) -> Option<EscrowStatus> {
        self.core
            .chain
            .ledger()
            .escrows
            .get(id)
            .map(|b| b.status.clone())
    }

    /// Every distinct settlement tx hash that passed `CheckTx` for an escrow (dropped, failed
    /// and committed ones alike): a correct gateway shows exactly one per settlement.
    pub fn settlement_tx_hashes(&self, id: &str) -> Vec<String> {
        let ledger = self.core.chain.ledger();
        ledger
            .settle_hashes
            .get(id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Replaces the tx faults of the chain (see [`TxFaults`]).
    pub fn set_tx_faults(&self, faults: TxFaults) {
        self.core.chain.ledger().faults = faults;
    }

    /// Credits `amount` to `address` on chain (a faucet: opens the account if needed).
    pub fn fund(&self, address: &Address, amount: u64) {
        self.core.chain.ledger().credit(address, amount);
    }

    /// Closes (`false`) or reopens the chain API's port: clients get "connection refused".
    pub fn set_chain_reachable(&self, up: bool) {
        self.chain_listener.set_up(up);
    }

    /// Height, epoch and phase now.
    pub fn epoch(&self) -> EpochView {
        self.core.chain.epoch_view()
    }

    /// Adds a grant on the chain (e.g. a warm key for host `i`: [`warm::warm_key`]).
    pub fn add_grant(&self, grant: Grant) {
        self.core.warm.add(grant);
    }

    /// Revokes every grant of host `index`'s validator to its warm key; returns how many.
    pub fn revoke_warm_grant(&self, index: usize) -> Result<usize, SimError> {
        let h = self.hosts.get(index).ok_or(SimError::UnknownHost(index))?;
        let warm = warm::warm_key(&self.core.cfg.seed, index);
        Ok(self.core.warm.revoke(&h.address, warm.address()))
    }

    /// Every grant the chain holds.
    pub fn grants(&self) -> Vec<Grant> {
        self.core.warm.all()
    }

    /// Replaces the grants endpoint's faults.
    pub fn set_grants_fault(&self, fault: GrantsFault) {
        self.core.warm.set_fault(fault);
    }
}
