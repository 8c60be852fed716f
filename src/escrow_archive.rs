//! Archive rows of deleted escrows (`DELETE /v1/admin/escrows/{id}`, `http::escrow_delete`, or
//! the rotation's retention of settled escrows, `rotation::retention`; both through
//! `escrow_removal`): the registration record moves to [`NS_DELETED`], so whatever must still
//! read a deleted escrow's chain data (the cost ledger's tail replaying its kept diff log) finds
//! it there.

use devshard_actors::{escrow::EscrowInfo, store::SharedStore};
use serde::{Deserialize, Serialize};

use crate::escrows::{self, RecordError};

/// Store namespace of deleted escrows' archive rows: key = escrow id.
pub const NS_DELETED: &str = "escrow_deleted";

/// Why a deletion was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Deletable {
    /// Settled on chain.
    Settled,
    /// Never granted a nonce (`?force=true`).
    Unused,
}

/// Who removed an escrow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovedBy {
    /// `DELETE /v1/admin/escrows/{id}` (archive rows written before `by` existed read so).
    #[default]
    Admin,
    /// The rotation, `rotation.settled_retention_s` after the escrow settled.
    Retention,
}

impl RemovedBy {
    /// Log field and API label.
    pub fn label(self) -> &'static str {
        match self {
            RemovedBy::Admin => "admin",
            RemovedBy::Retention => "retention",
        }
    }
}

/// The archive row of a deleted escrow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Archived {
    pub escrow_id: String,
    pub reason: Deletable,
    /// Who removed it (`admin` for rows older than this field).
    #[serde(default)]
    pub by: RemovedBy,
    /// The nonces it had sequenced.
    pub nonce: u64,
    pub deleted_at_ms: i64,
    pub registration: EscrowInfo,
}

/// The chain data of an escrow: its registration, else its archive row.
pub fn registration(
    store: &SharedStore,
    escrow_id: &str,
) -> Result<Option<EscrowInfo>, RecordError> {
    if let Some(info) = escrows::stored_info(store, escrow_id)? {
        return Ok(Some(info));
    }
    let archived: Option<Archived> =
        escrows::read_record(store, (NS_DELETED, "archive"), escrow_id)?;
    Ok(archived.map(|a| a.registration))
}
