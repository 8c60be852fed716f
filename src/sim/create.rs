//! `MsgCreateDevshardEscrow` on the simulated chain (docs/lifecycle.md §4, §6): what a real
//! chain checks before it takes a deposit. The signer is the message's creator and on the
//! creator allow-list; the model is the one the group serves; the creator's spendable balance
//! (after the tx fee) covers the deposit. The new escrow gets the next id, the group and session
//! config every simulated escrow has, and the configured `max_nonce`; its id is the
//! `escrow_id` attribute of the tx's `devshard_escrow_created` event. Replays are impossible:
//! `CheckTx` dedupes the hash, and a hash already delivered is refused here as well.

use std::collections::{BTreeMap, BTreeSet};

use devshard_actors::protocol::{
    cosmos::MsgCreateDevshardEscrow, crypto::Address, state::SessionConfig,
};

use super::{
    chain::EscrowInfo,
    ledger::{EscrowBook, EscrowStatus, Ledger, TxAttribute, TxEvent},
    txs::TxError,
};

/// Event type of a created escrow.
pub const EVENT_ESCROW_CREATED: &str = "devshard_escrow_created";

/// What a created escrow is made of (the group every simulated escrow shares).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Template {
    pub model: String,
    pub slots: Vec<Address>,
    pub epoch_index: u64,
    pub session_config: SessionConfig,
    pub max_nonce: u64,
}

/// Creation state of the chain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Creation {
    pub template: Option<Template>,
    /// Accounts that may create escrows.
    pub allowed: BTreeSet<Address>,
    /// The id the next escrow gets.
    pub next_id: u64,
    /// tx hash → the escrow it created.
    pub by_tx: BTreeMap<String, String>,
}

impl Creation {
    /// Creation over `template`, allowed to `creators`, numbering after the largest id in use.
    pub(crate) fn new(template: Template, creators: &[Address], ids: &[String]) -> Creation {
        let last = ids.iter().filter_map(|i| i.parse::<u64>().ok()).max();
        Creation {
            template: Some(template),
            allowed: creators.iter().cloned().collect(),
            next_id: last.map_or(1, |l| l + 1),
            by_tx: BTreeMap::new(),
        }
    }
}

fn invalid(text: impl Into<String>) -> TxError {
    TxError::InvalidCreation(text.into())
}

/// Executes one creation (the tx fee is already charged); answers its events.
pub(crate) fn create_escrow(
    ledger: &mut Ledger,
    signer: &Address,
    msg: &MsgCreateDevshardEscrow,
    hash: &str,
) -> Result<Vec<TxEvent>, TxError> {
    if msg.creator != signer.as_str() {
        return Err(TxError::Unauthorized(format!(
            "creator {} did not sign the tx",
            msg.creator
        )));
    }
    if !ledger.creation.allowed.contains(signer) {
        return Err(TxError::CreatorNotAllowed(signer.to_string()));
    }
    if ledger.creation.by_tx.contains_key(hash) {
        return Err(TxError::Duplicate(hash.to_owned()));
    }
    let template = ledger
        .creation
        .template
        .clone()
        .ok_or_else(|| invalid("this chain creates no escrows"))?;
    if msg.model_id != template.model {
        return Err(invalid(format!(
            "no group serves model {:?} (served: {:?})",
            msg.model_id, template.model
        )));
    }
    let fee = template.session_config.create_devshard_fee;
    if msg.amount <= fee {
        return Err(invalid(format!(
            "amount {} does not exceed the creation fee {fee}",
            msg.amount
        )));
    }
    let balance = ledger.balance(signer);
    if balance < msg.amount {
        return Err(TxError::InsufficientDeposit {
            balance,
            amount: msg.amount,
        });
    }
    if let Some(a) = ledger.accounts.get_mut(signer) {
        a.balance -= msg.amount;
    }
    let id = ledger.creation.next_id.to_string();
    ledger.creation.next_id += 1;
    let info = EscrowInfo {
        escrow_id: id.clone(),
        creator: signer.clone(),
        amount: msg.amount,
        slots: template.slots,
        epoch_index: template.epoch_index,
        session_config: template.session_config,
        max_nonce: template.max_nonce,
    };
    ledger.escrows.insert(
        id.clone(),
        EscrowBook {
            max_nonce: info.max_nonce,
            info,
            status: EscrowStatus::Open,
        },
    );
    ledger.creation.by_tx.insert(hash.to_owned(), id.clone());
    let attr = |key: &str, value: String| TxAttribute {
        key: key.to_owned(),
        value,
    };
    Ok(vec![TxEvent {
        kind: EVENT_ESCROW_CREATED.to_owned(),
        attributes: vec![
            attr("escrow_id", id),
            attr("creator", signer.to_string()),
            attr("amount", msg.amount.to_string()),
            attr("model_id", msg.model_id.clone()),
        ],
    }])
}
