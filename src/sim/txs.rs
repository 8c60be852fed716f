//! `CheckTx` and `DeliverTx` of the simulated chain: what a real chain checks before it moves
//! money, never trusting the sender (docs/lifecycle.md §2–§3, §6).
//!
//! - [`check`]: decode `TxRaw` / `AuthInfo` / `TxBody`, one secp256k1 signer in
//!   `SIGN_MODE_DIRECT`, the 64-byte low-S signature over the SignDoc rebuilt from the tx's own
//!   bytes, this chain's id and the signer's account number; unordered with a timeout in
//!   `(now, now + 10 min]`; fee denom and amount; dedupe by hash.
//! - [`deliver`]: the fee, then `MsgCreateDevshardEscrow` ([`super::create`]) or
//!   `MsgSettleDevshardEscrow`: the settler signed the tx and created
//!   the escrow, the escrow is open, the root recomputes from the message, every signature
//!   recovers to its slot's validator (or a warm key that validator grants) over
//!   `StateSignatureContent`, and the distinct signers'
//!   slots reach `2·slots/3 + 1`. Then each host is paid its `cost` and the creator refunded
//!   `amount − fees − Σ cost`.

use std::collections::{BTreeMap, BTreeSet};

use cosmos_sdk_proto::cosmos::{
    crypto::secp256k1::PubKey,
    tx::{
        signing::v1beta1::SignMode,
        v1beta1::{mode_info, AuthInfo, SignDoc, TxRaw},
    },
};
use prost::Message;
use secp256k1::{ecdsa::Signature, Message as Digest, PublicKey, SECP256K1};
use sha2::{Digest as _, Sha256};

use devshard_actors::protocol::{
    cosmos::{
        MsgCreateDevshardEscrow, MsgSettleDevshardEscrow, TxBody, CREATE_TYPE_URL,
        SECP256K1_PUBKEY_TYPE_URL, SETTLE_TYPE_URL,
    },
    crypto::{recover_address, sha256, Address},
    proto::{HostStatsMapProto, StateSignatureContent},
};

use super::ledger::{EscrowStatus, Ledger, TxEvent, DENOM, MAX_UNORDERED_TTL_S, SIM_CHAIN_ID};

/// Why a tx was refused (`CheckTx`) or failed (`DeliverTx`); codes as the Cosmos SDK's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    #[error("tx parse error: {0}")]
    Decode(String),
    #[error("signature verification failed; please verify account number ({account_number}) and chain-id ({chain_id}): unauthorized")]
    BadSignature {
        account_number: u64,
        chain_id: String,
    },
    #[error("{0}: unauthorized")]
    Unauthorized(String),
    #[error("account {0} not found")]
    UnknownAccount(String),
    #[error("insufficient fees; got: {got}{denom} required: {required}{denom}: insufficient fee")]
    InsufficientFee {
        got: u64,
        required: u64,
        denom: String,
    },
    #[error("spendable balance {balance}{DENOM} is smaller than {fee}{DENOM}: insufficient funds")]
    InsufficientFunds { balance: u64, fee: u64 },
    #[error("unordered tx must have a timeout_timestamp in (now, now + {MAX_UNORDERED_TTL_S}s]: tx timeout")]
    BadTimeout,
    #[error("tx {0} already exists in cache")]
    Duplicate(String),
    #[error("unknown message type {0}")]
    UnknownMessage(String),
    #[error("devshard escrow {0} not found")]
    EscrowNotFound(String),
    #[error("devshard escrow {0} already settled")]
    AlreadySettled(String),
    #[error("settler {settler} is not the creator {creator} of escrow {escrow}")]
    NotCreator {
        escrow: String,
        settler: String,
        creator: String,
    },
    #[error("state root mismatch: message {message}, recomputed {recomputed}")]
    RootMismatch { message: String, recomputed: String },
    #[error("invalid settlement: {0}")]
    InvalidSettlement(String),
    #[error("invalid state signature of slot {0}")]
    InvalidStateSignature(u32),
    #[error("insufficient signatures: {weight}/{threshold} weight")]
    QuorumShort { weight: u32, threshold: u32 },
    #[error("spendable balance {balance}{DENOM} cannot fund a deposit of {amount}{DENOM}: insufficient funds")]
    InsufficientDeposit { balance: u64, amount: u64 },
    #[error("{0} may not create devshard escrows")]
    CreatorNotAllowed(String),
    #[error("invalid escrow creation: {0}")]
    InvalidCreation(String),
}

impl TxError {
    pub fn code(&self) -> u32 {
        match self {
            TxError::Decode(_) => 2,
            TxError::BadSignature { .. } | TxError::Unauthorized(_) => 4,
            TxError::InsufficientFunds { .. } | TxError::InsufficientDeposit { .. } => 5,
            TxError::UnknownAccount(_) => 9,
            TxError::InsufficientFee { .. } => 13,
            TxError::Duplicate(_) => 19,
            TxError::BadTimeout => 30,
            TxError::UnknownMessage(_) => 12,
            TxError::EscrowNotFound(_) => 1101,
            TxError::AlreadySettled(_) => 1102,
            TxError::NotCreator { .. } => 1103,
            TxError::RootMismatch { .. } => 1104,
            TxError::InvalidSettlement(_) => 1105,
            TxError::InvalidStateSignature(_) => 1106,
            TxError::QuorumShort { .. } => 1107,
            TxError::CreatorNotAllowed(_) => 1108,
            TxError::InvalidCreation(_) => 1109,
        }
    }

    pub fn codespace(&self) -> &'static str {
        if self.code() > 1000 {
            "inference"
        } else {
            "sdk"
        }
    }
}

fn decode<M: Message + Default>(bytes: &[u8], what: &str) -> Result<M, TxError> {
    M::decode(bytes).map_err(|e| TxError::Decode(format!("{what}: {e}")))
}

/// A tx that passed `CheckTx`.
pub(crate) struct Checked {
    pub signer: Address,
    /// The escrow of a settlement message, if the tx carries one.
    pub settles: Option<String>,
    pub fee: u64,
    pub body: TxBody,
    pub timeout_unix_s: i64,
}

/// `CheckTx` (re-run by `DeliverTx` with `now_s = None`: no timeout window, no dedupe).
pub(crate) fn check(ledger: &Ledger, bytes: &[u8], now_s: Option<i64>) -> Result<Checked, TxError> {
    let raw: TxRaw = decode(bytes, "TxRaw")?;
    let auth: AuthInfo = decode(&raw.auth_info_bytes, "AuthInfo")?;
    let body: TxBody = decode(&raw.body_bytes, "TxBody")?;
    let [signer_info] = auth.signer_infos.as_slice() else {
        return Err(TxError::Unauthorized("exactly one signer expected".into()));
    };
    let single = matches!(
        signer_info.mode_info.as_ref().and_then(|m| m.sum.as_ref()),
        Some(mode_info::Sum::Single(s)) if s.mode == SignMode::Direct as i32
    );
    if !single {
        return Err(TxError::Unauthorized(
            "sign mode must be SIGN_MODE_DIRECT".into(),
        ));
    }
    let pk_any = signer_info
        .public_key
        .as_ref()
        .filter(|a| a.type_url == SECP256K1_PUBKEY_TYPE_URL)
        .ok_or_else(|| TxError::Unauthorized("signer needs a secp256k1 public key".into()))?;
    let pk: PubKey = decode(&pk_any.value, "PubKey")?;
    let public = PublicKey::from_slice(&pk.key)
        .map_err(|e| TxError::Unauthorized(format!("public key: {e}")))?;
    let signer = Address::from_public_key(&public);
    let account = ledger
        .accounts
        .get(&signer)
        .ok_or_else(|| TxError::UnknownAccount(signer.to_string()))?;
    let doc = SignDoc {
        body_bytes: raw.body_bytes.clone(),
        auth_info_bytes: raw.auth_info_bytes.clone(),
        chain_id: SIM_CHAIN_ID.to_owned(),
        account_number: account.account_number,
    }
    .encode_to_vec();
    let bad_sig = || TxError::BadSignature {
        account_number: account.account_number,
        chain_id: SIM_CHAIN_ID.to_owned(),
    };
    let [sig] = raw.signatures.as_slice() else {
        return Err(bad_sig());
    };
    // `from_compact` needs exactly 64 bytes; `verify_ecdsa` rejects high-S signatures.
    let sig = Signature::from_compact(sig).map_err(|_| bad_sig())?;
    let digest: [u8; 32] = Sha256::digest(&doc).into();
    SECP256K1
        .verify_ecdsa(&Digest::from_digest(digest), &sig, &public)
        .map_err(|_| bad_sig())?;
    let timeout = body.timeout_timestamp.map_or(0, |t| t.seconds);
    let in_window = |now: i64| timeout > now && timeout <= now + MAX_UNORDERED_TTL_S;
    if !body.unordered || now_s.is_some_and(|now| !in_window(now)) {
        return Err(TxError::BadTimeout);
    }
    let fee = auth.fee.unwrap_or_default();
    let paid: u64 = fee
        .amount
        .iter()
        .filter(|c| c.denom == DENOM)
        .filter_map(|c| c.amount.parse::<u64>().ok())
        .sum();
    if paid < ledger.faults.min_fee.max(1) {
        return Err(TxError::InsufficientFee {
            got: paid,
            required: ledger.faults.min_fee.max(1),
            denom: DENOM.to_owned(),
        });
    }
    if account.balance < paid {
        return Err(TxError::InsufficientFunds {
            balance: account.balance,
            fee: paid,
        });
    }
    let settles = match body.messages.as_slice() {
        [m] if m.type_url == SETTLE_TYPE_URL => MsgSettleDevshardEscrow::decode(m.value.as_slice())
            .ok()
            .map(|s| s.escrow_id.to_string()),
        _ => None,
    };
    Ok(Checked {
        signer,
        settles,
        fee: paid,
        body,
        timeout_unix_s: timeout,
    })
}

/// `DeliverTx`: charges the fee, then executes the message (all or nothing); answers the
/// events of a successful tx.
pub(crate) fn deliver(
    ledger: &mut Ledger,
    bytes: &[u8],
    hash: &str,
    height: u64,
) -> Result<Vec<TxEvent>, TxError> {
    // The timeout was checked when the tx entered the mempool; a block does not re-check it.
    let checked = check(ledger, bytes, None)?;
    if let Some(a) = ledger.accounts.get_mut(&checked.signer) {
        a.balance = a.balance.saturating_sub(checked.fee);
    }
    let [msg] = checked.body.messages.as_slice() else {
        return Err(TxError::UnknownMessage(
            "exactly one message expected".into(),
        ));
    };
    if msg.type_url == CREATE_TYPE_URL {
        let create: MsgCreateDevshardEscrow = decode(&msg.value, "MsgCreateDevshardEscrow")?;
        return super::create::create_escrow(ledger, &checked.signer, &create, hash);
    }
    if msg.type_url != SETTLE_TYPE_URL {
        return Err(TxError::UnknownMessage(msg.type_url.clone()));
    }
    let settle: MsgSettleDevshardEscrow = decode(&msg.value, "MsgSettleDevshardEscrow")?;
    settle_escrow(ledger, &checked.signer, &settle, hash, height).map(|()| Vec::new())
}

/// `sha256(host_stats_hash ‖ fees_be8 ‖ rest_hash ‖ sha256(version) ‖ 0x02)` from the message.
fn recompute_root(msg: &MsgSettleDevshardEscrow) -> Vec<u8> {
    let stats = HostStatsMapProto {
        entries: msg.host_stats.clone(),
    };
    let mut h = Sha256::new();
    h.update(sha256(&stats.encode_to_vec()));
    h.update(msg.fees.to_be_bytes());
    h.update(&msg.rest_hash);
    h.update(sha256(msg.state_root_and_protocol_version.as_bytes()));
    h.update([2u8]);
    h.finalize().to_vec()
}

fn settle_escrow(
    ledger: &mut Ledger,
    signer: &Address,
    msg: &MsgSettleDevshardEscrow,
    hash: &str,
    height: u64,
) -> Result<(), TxError> {
    let id = msg.escrow_id.to_string();
    if msg.settler != signer.as_str() {
        return Err(TxError::Unauthorized(format!(
            "settler {} did not sign the tx",
            msg.settler
        )));
    }
    let book = ledger
        .escrows
        .get(&id)
        .ok_or_else(|| TxError::EscrowNotFound(id.clone()))?;
    if book.status != EscrowStatus::Open {
        return Err(TxError::AlreadySettled(id));
    }
    let info = &book.info;
    if info.creator.as_str() != msg.settler {
        return Err(TxError::NotCreator {
            escrow: id,
            settler: msg.settler.clone(),
            creator: info.creator.to_string(),
        });
    }
    if msg.state_root_and_protocol_version != "v2" || msg.rest_hash.len() != 32 {
        return Err(TxError::InvalidSettlement(
            "unsupported state root version or rest_hash length".into(),
        ));
    }
    if msg.nonce > book.max_nonce {
        return Err(TxError::InvalidSettlement(format!(
            "nonce {} beyond max_nonce {}",
            msg.nonce, book.max_nonce
        )));
    }
    let recomputed = recompute_root(msg);
    if recomputed != msg.state_root {
        return Err(TxError::RootMismatch {
            message: hex::encode(&msg.state_root),
            recomputed: hex::encode(recomputed),
        });
    }
    let slots = &info.slots;
    let stat_slots: Vec<u32> = msg.host_stats.iter().map(|s| s.slot_id).collect();
    let expected: Vec<u32> = (0..slots.len() as u32).collect();
    if stat_slots != expected {
        return Err(TxError::InvalidSettlement(
            "host_stats must list every slot once, in order".into(),
        ));
    }
    let content = StateSignatureContent {
        state_root: msg.state_root.clone(),
        escrow_id: id.clone(),
        nonce: msg.nonce,
    }
    .encode_to_vec();
    let mut signers = BTreeSet::new();
    for s in &msg.signatures {
        let owner = slots
            .get(s.slot_id as usize)
            .ok_or(TxError::InvalidStateSignature(s.slot_id))?;
        // The validator's cold key, or a warm key it grants (checked by the chain itself).
        let granted =
            |a: &Address| (ledger.grants.as_ref()).is_some_and(|g| g.is_granted(owner, a));
        match recover_address(&content, &s.signature) {
            Ok(a) if &a == owner || granted(&a) => {
                signers.insert(owner.clone());
            }
            _ => return Err(TxError::InvalidStateSignature(s.slot_id)),
        }
    }
    let weight = slots.iter().filter(|a| signers.contains(*a)).count() as u32;
    let threshold = 2 * slots.len() as u32 / 3 + 1;
    if weight < threshold {
        return Err(TxError::QuorumShort { weight, threshold });
    }
    let costs = msg
        .host_stats
        .iter()
        .try_fold(0u64, |a, s| a.checked_add(s.cost));
    let refund = costs
        .and_then(|c| c.checked_add(msg.fees))
        .and_then(|spent| info.amount.checked_sub(spent))
        .ok_or_else(|| TxError::InvalidSettlement("fees and costs exceed the deposit".into()))?;
    let mut paid: BTreeMap<Address, u64> = BTreeMap::new();
    for s in &msg.host_stats {
        if let Some(a) = slots.get(s.slot_id as usize) {
            *paid.entry(a.clone()).or_default() += s.cost;
        }
    }
    let creator = info.creator.clone();
    for (a, amount) in &paid {
        ledger.credit(a, *amount);
    }
    ledger.credit(&creator, refund);
    if let Some(book) = ledger.escrows.get_mut(&id) {
        book.status = EscrowStatus::Settled {
            tx_hash: hash.to_owned(),
            height,
            nonce: msg.nonce,
            fees: msg.fees,
            refund,
            paid,
        };
    }
    Ok(())
}
