//! The simulated chain's money and txs (docs/lifecycle.md §6): accounts (numbers, balances), escrow
//! deposits with their `max_nonce` and `settled` status, the mempool and committed txs.
//!
//! A broadcast runs `CheckTx` ([`super::txs::check`]: decoding, the `SIGN_MODE_DIRECT`
//! signature over the real SignDoc bytes and account number, fee, unordered timeout, dedupe by
//! hash). An accepted tx waits in the mempool until its commit time, then `DeliverTx`
//! ([`super::txs::deliver`]) runs the settlement checks and moves the money. The fee is
//! charged whenever a tx is delivered, even when its message fails (as a Cosmos chain does).
//! Work is done lazily: every chain request first commits what is due.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use devshard_actors::protocol::crypto::Address;

use super::chain::EscrowInfo;

/// Chain id reported by `node_info` and required in every SignDoc.
pub const SIM_CHAIN_ID: &str = "gonka-devshard-sim";
/// The fee denom.
pub const DENOM: &str = "ngonka";
/// First account number handed out (0 would hide a missing account number in a SignDoc).
const FIRST_ACCOUNT_NUMBER: u64 = 7;
/// Longest unordered-tx timeout the chain accepts (Cosmos SDK `MaxUnorderedTTL`).
pub const MAX_UNORDERED_TTL_S: i64 = 600;

/// Fault knobs of the tx endpoints (each counter applies to that many broadcasts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TxFaults {
    /// The next `delay_times` broadcasts are processed normally but answered only after
    /// `broadcast_delay_ms` (a broadcast that times out although the tx commits).
    pub broadcast_delay_ms: u64,
    pub delay_times: u32,
    /// The next `reject_times` broadcasts answer `reject_code` (≠ 0) without taking the tx.
    pub reject_code: u32,
    pub reject_times: u32,
    /// The next `drop_times` accepted txs are dropped from the mempool: answered code 0, never
    /// committed, not remembered (a re-send is accepted again).
    pub drop_times: u32,
    /// Accepted txs commit this long after their broadcast (0 = at once).
    pub commit_delay_ms: u64,
    /// Smallest fee accepted (in [`DENOM`]).
    pub min_fee: u64,
}

/// One account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Account {
    pub address: Address,
    pub account_number: u64,
    pub balance: u64,
}

/// Where an escrow's deposit stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum EscrowStatus {
    Open,
    Settled {
        tx_hash: String,
        height: u64,
        nonce: u64,
        fees: u64,
        refund: u64,
        /// Paid to each validator address (Σ of its slots' `cost`).
        paid: BTreeMap<Address, u64>,
    },
}

/// An escrow's deposit on chain.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EscrowBook {
    pub info: EscrowInfo,
    pub max_nonce: u64,
    pub status: EscrowStatus,
}

/// A tx result as `GET /cosmos/tx/v1beta1/txs/{hash}` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TxResult {
    pub hash: String,
    pub height: u64,
    pub code: u32,
    pub codespace: String,
    pub raw_log: String,
    /// Events of a successful tx (`devshard_escrow_created` of a creation).
    pub events: Vec<TxEvent>,
}

/// One event of a committed tx: `{type, attributes: [{key, value}]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TxEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub attributes: Vec<TxAttribute>,
}

/// `{key, value}` of an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TxAttribute {
    pub key: String,
    pub value: String,
}

/// An accepted tx waiting for its block.
#[derive(Clone, Debug)]
pub(crate) struct MempoolTx {
    pub hash: String,
    pub bytes: Vec<u8>,
    pub commit_at_ms: i64,
    pub timeout_unix_s: i64,
}

/// The chain's state.
#[derive(Debug)]
pub(crate) struct Ledger {
    pub accounts: BTreeMap<Address, Account>,
    pub escrows: BTreeMap<String, EscrowBook>,
    pub committed: BTreeMap<String, TxResult>,
    pub mempool: Vec<MempoolTx>,
    /// Hashes seen by unordered dedupe, with their timeout (unix s).
    pub seen: BTreeMap<String, i64>,
    /// Every distinct settlement tx hash that passed `CheckTx`, per escrow.
    pub settle_hashes: BTreeMap<String, BTreeSet<String>>,
    pub faults: TxFaults,
    /// The chain's warm-key grants: a state signature by a key its validator granted counts
    /// for that validator's slots (docs/lifecycle.md §2, §5).
    pub grants: Option<std::sync::Arc<super::warm::WarmRegistry>>,
    /// What `MsgCreateDevshardEscrow` creates from (`super::create`).
    pub creation: super::create::Creation,
    next_account: u64,
}

impl Ledger {
    /// Accounts for the creator (with `creator_balance`) and every host; one book per escrow.
    pub(crate) fn new(escrows: &[EscrowInfo], hosts: &[Address], creator_balance: u64) -> Ledger {
        let mut ledger = Ledger {
            accounts: BTreeMap::new(),
            escrows: BTreeMap::new(),
            committed: BTreeMap::new(),
            mempool: Vec::new(),
            seen: BTreeMap::new(),
            settle_hashes: BTreeMap::new(),
            faults: TxFaults::default(),
            grants: None,
            creation: super::create::Creation::default(),
            next_account: FIRST_ACCOUNT_NUMBER,
        };
        for e in escrows {
            ledger.open_account(&e.creator, creator_balance);
            ledger.escrows.insert(
                e.escrow_id.clone(),
                EscrowBook {
                    info: e.clone(),
                    max_nonce: e.max_nonce,
                    status: EscrowStatus::Open,
                },
            );
        }
        for h in hosts {
            ledger.open_account(h, 0);
        }
        ledger
    }

    pub(crate) fn open_account(&mut self, address: &Address, balance: u64) {
        if self.accounts.contains_key(address) {
            return;
        }
        let number = self.next_account;
        self.next_account += 1;
        self.accounts.insert(
            address.clone(),
            Account {
                address: address.clone(),
                account_number: number,
                balance,
            },
        );
    }

    /// Credits `amount` to `address` (opening the account if needed).
    pub(crate) fn credit(&mut self, address: &Address, amount: u64) {
        self.open_account(address, 0);
        if let Some(a) = self.accounts.get_mut(address) {
            a.balance = a.balance.saturating_add(amount);
        }
    }

    pub(crate) fn balance(&self, address: &Address) -> u64 {
        self.accounts.get(address).map_or(0, |a| a.balance)
    }

    /// Commits every mempool tx due at `now_ms` (in broadcast order) at `height`.
    pub(crate) fn advance(&mut self, now_ms: i64, height: u64) {
        let (due, later): (Vec<MempoolTx>, Vec<MempoolTx>) = std::mem::take(&mut self.mempool)
            .into_iter()
            .partition(|t| t.commit_at_ms <= now_ms);
        self.mempool = later;
        let now_s = now_ms.div_euclid(1000);
        self.seen.retain(|_, timeout| *timeout >= now_s);
        for tx in due {
            if tx.timeout_unix_s < now_s {
                // Expired in the mempool: never committed, no longer deduplicated.
                continue;
            }
            let result = match super::txs::deliver(self, &tx.bytes, &tx.hash, height) {
                Ok(events) => TxResult {
                    hash: tx.hash.clone(),
                    height,
                    code: 0,
                    codespace: String::new(),
                    raw_log: String::new(),
                    events,
                },
                Err(e) => TxResult {
                    hash: tx.hash.clone(),
                    height,
                    code: e.code(),
                    codespace: e.codespace().to_owned(),
                    raw_log: e.to_string(),
                    events: Vec::new(),
                },
            };
            self.committed.insert(tx.hash, result);
        }
    }
}
