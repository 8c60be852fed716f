//! Row encoding: diffs <-> `diffs` rows, JSON records <-> `records` rows, and error mapping.
//!
//! A diff's transactions are stored in their wire form, [`Diff::wire_txs`] (proto
//! `DiffContent{nonce, txs}`), so a stored log can be replayed to hosts without re-encoding and a
//! row carries its own nonce as a consistency check against the primary key.

use devshard_actors::{
    protocol::{diff::Diff, proto::DiffContent, warm::WarmBinding},
    store::StoreError,
};
use prost::Message;

/// Maps a SQLite error: undecodable column values are corruption, everything else is i/o.
pub(crate) fn sql_err(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => StoreError::Corrupt(e.to_string()),
        e => StoreError::Io(e.to_string()),
    }
}

/// The column values of one `diffs` row (without the escrow id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiffRow {
    pub nonce: i64,
    pub txs: Vec<u8>,
    pub user_sig: Vec<u8>,
    pub post_state_root: Vec<u8>,
    /// JSON of the warm-key delta, `None` when the diff bound no key.
    pub warm_delta: Option<String>,
}

/// SQLite integers are signed 64-bit; nonces above `i64::MAX` cannot be stored.
pub(crate) fn nonce_to_sql(nonce: u64) -> Result<i64, StoreError> {
    i64::try_from(nonce).map_err(|_| StoreError::Io(format!("diff nonce {nonce} exceeds i64::MAX")))
}

/// Encodes a diff and the warm keys it bound into its row.
pub(crate) fn encode_diff(diff: &Diff, warm_delta: &[WarmBinding]) -> Result<DiffRow, StoreError> {
    let warm_delta = if warm_delta.is_empty() {
        None
    } else {
        Some(
            serde_json::to_string(warm_delta)
                .map_err(|e| StoreError::Io(format!("encode warm-key delta: {e}")))?,
        )
    };
    Ok(DiffRow {
        nonce: nonce_to_sql(diff.nonce)?,
        txs: diff.wire_txs(),
        user_sig: diff.user_sig.clone(),
        post_state_root: diff.post_state_root.clone(),
        warm_delta,
    })
}

/// Decodes a stored warm-key delta.
pub(crate) fn decode_warm_delta(
    escrow_id: &str,
    nonce: i64,
    text: &str,
) -> Result<Vec<WarmBinding>, StoreError> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Corrupt(format!(
            "escrow {escrow_id}: warm-key delta of nonce {nonce}: {e}"
        ))
    })
}

/// Decodes a row back into the diff it was encoded from.
pub(crate) fn decode_diff(escrow_id: &str, row: DiffRow) -> Result<Diff, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("escrow {escrow_id}: {what}"));
    let nonce = u64::try_from(row.nonce).map_err(|_| corrupt(format!("nonce {}", row.nonce)))?;
    let content = DiffContent::decode(row.txs.as_slice())
        .map_err(|e| corrupt(format!("txs of nonce {nonce} do not decode: {e}")))?;
    if content.nonce != nonce {
        return Err(corrupt(format!(
            "row nonce {nonce} holds txs of nonce {}",
            content.nonce
        )));
    }
    Ok(Diff {
        nonce,
        txs: content.txs,
        user_sig: row.user_sig,
        post_state_root: row.post_state_root,
    })
}

/// Serializes a record value to the JSON text stored in `records.value`.
pub(crate) fn encode_value(value: &serde_json::Value) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Io(format!("record to JSON: {e}")))
}

/// Parses a stored record value.
pub(crate) fn decode_value(
    namespace: &str,
    key: &str,
    text: &str,
) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("record {namespace}/{key} is not JSON: {e}")))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use devshard_actors::protocol::proto::{DevshardTx, MsgStartInference, Tx};

    use super::*;

    #[test]
    fn diff_row_round_trip_and_corruption() {
        let tx = DevshardTx::new(Tx::StartInference(MsgStartInference {
            inference_id: 7,
            prompt_hash: vec![1, 2, 3],
            model: "m".into(),
            input_length: 10,
            max_tokens: 20,
            started_at: 1_700_000_000,
        }));
        let d = Diff {
            nonce: 3,
            txs: vec![tx],
            user_sig: vec![9; 65],
            post_state_root: vec![4; 32],
        };
        let row = encode_diff(&d, &[]).unwrap();
        assert_eq!(decode_diff("e", row.clone()).unwrap(), d);

        let wrong_nonce = DiffRow {
            nonce: 4,
            ..row.clone()
        };
        assert!(matches!(
            decode_diff("e", wrong_nonce),
            Err(StoreError::Corrupt(_))
        ));
        let garbage = DiffRow {
            txs: vec![0xff, 0xff, 0xff],
            ..row
        };
        assert!(matches!(
            decode_diff("e", garbage),
            Err(StoreError::Corrupt(_))
        ));
        assert!(nonce_to_sql(u64::MAX).is_err());
        assert!(matches!(
            decode_value("n", "k", "{"),
            Err(StoreError::Corrupt(_))
        ));
    }
}
