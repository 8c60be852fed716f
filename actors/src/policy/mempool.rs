//! Mempool hygiene: which transactions the gateway takes from a host's mempool (a `devshard_meta`
//! event or `GET …/mempool`). Hosts propose only what hosts may sign: a receipt's
//! `MsgConfirmStart`, an executor's `MsgFinishInference`, a validator's `MsgValidation` and
//! `MsgValidationVote`. Everything else (`MsgStartInference`, `MsgTimeoutInference`,
//! `MsgFinalizeRound`, `MsgRevealSeed`, an empty tx) is the user's to sequence: taken from a
//! mempool it could move the escrow (a `MsgFinalizeRound` would start finalization), so it is
//! dropped, and the host that proposed it is byzantine.

use serde::Serialize;

use crate::protocol::proto::{DevshardTx, Tx};

/// Why a mempool tx is refused (its kind; a bounded metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ForeignTx {
    StartInference,
    TimeoutInference,
    FinalizeRound,
    RevealSeed,
    Empty,
}

impl ForeignTx {
    /// The metric / log label.
    pub fn label(self) -> &'static str {
        match self {
            ForeignTx::StartInference => "start_inference",
            ForeignTx::TimeoutInference => "timeout_inference",
            ForeignTx::FinalizeRound => "finalize_round",
            ForeignTx::RevealSeed => "reveal_seed",
            ForeignTx::Empty => "empty",
        }
    }
}

/// `Ok` for the four kinds a host may propose, else the refused kind.
pub fn admit(tx: &DevshardTx) -> Result<(), ForeignTx> {
    match &tx.tx {
        Some(Tx::ConfirmStart(_))
        | Some(Tx::FinishInference(_))
        | Some(Tx::Validation(_))
        | Some(Tx::ValidationVote(_)) => Ok(()),
        Some(Tx::StartInference(_)) => Err(ForeignTx::StartInference),
        Some(Tx::TimeoutInference(_)) => Err(ForeignTx::TimeoutInference),
        Some(Tx::FinalizeRound(_)) => Err(ForeignTx::FinalizeRound),
        Some(Tx::RevealSeed(_)) => Err(ForeignTx::RevealSeed),
        None => Err(ForeignTx::Empty),
    }
}

/// Splits a host's mempool into the admissible txs and the refused kinds, in order.
pub fn sift(mempool: Vec<DevshardTx>) -> (Vec<DevshardTx>, Vec<ForeignTx>) {
    let mut ok = Vec::with_capacity(mempool.len());
    let mut refused = Vec::new();
    for tx in mempool {
        match admit(&tx) {
            Ok(()) => ok.push(tx),
            Err(kind) => refused.push(kind),
        }
    }
    (ok, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::proto::{
        MsgConfirmStart, MsgFinalizeRound, MsgFinishInference, MsgStartInference, MsgValidation,
        MsgValidationVote,
    };

    #[test]
    fn only_host_proposable_kinds_are_admitted() {
        let pool = vec![
            DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart::default())),
            DevshardTx::new(Tx::FinalizeRound(MsgFinalizeRound {})),
            DevshardTx::new(Tx::FinishInference(MsgFinishInference::default())),
            DevshardTx::new(Tx::StartInference(MsgStartInference::default())),
            DevshardTx::new(Tx::Validation(MsgValidation::default())),
            DevshardTx::new(Tx::ValidationVote(MsgValidationVote::default())),
            DevshardTx { tx: None },
        ];
        let (ok, refused) = sift(pool);
        assert_eq!(ok.len(), 4);
        assert_eq!(
            refused,
            vec![
                ForeignTx::FinalizeRound,
                ForeignTx::StartInference,
                ForeignTx::Empty
            ]
        );
        assert_eq!(ForeignTx::FinalizeRound.label(), "finalize_round");
    }
}
