//! Verification of one host's diffs on a fresh session of the escrow (see the module docs of
//! `adopt`).

use std::sync::Arc;

use super::{fetch::HostAnswer, HostChain, RejectReason, RejectedDiff};
use crate::{
    escrow::{
        info::EscrowInfo,
        session::{ReplayFault, Session},
    },
    protocol::{
        crypto::{sha256, Address},
        diff::Diff,
        warm::{Acceptance, CheckOutcome, WarmKeyChecker},
        wire::DiffRecord,
    },
};

/// Checks `answer` (what `host` served) from genesis; the chain ends at the first rejection.
pub async fn verify(
    info: &Arc<EscrowInfo>,
    host: &Address,
    answer: HostAnswer,
    warm: &WarmKeyChecker,
) -> HostChain {
    let weight = u32::try_from(info.group.iter().filter(|s| &s.validator == host).count())
        .unwrap_or(u32::MAX);
    let mut chain = HostChain::new(host.clone(), weight);
    let records = match answer {
        HostAnswer::Diffs(r) => r,
        HostAnswer::NoSession => Vec::new(),
        HostAnswer::Failed(e) => {
            chain.error = Some(e);
            return chain;
        }
    };
    chain.answered = true;
    let mut session = match Session::new(info.clone()) {
        Ok(s) => s.with_grants(warm.cache().clone()),
        Err(e) => {
            chain.answered = false;
            chain.error = Some(format!("the escrow's session cannot start: {e}"));
            return chain;
        }
    };
    let mut broken = false;
    for record in records {
        let nonce = record.diff.nonce;
        let verdict = if broken {
            Err((
                RejectReason::AfterRejected,
                "a previous diff was rejected".into(),
            ))
        } else {
            check(&mut session, &info.creator, record, warm).await
        };
        match verdict {
            Ok((diff, delta)) => {
                let prev = chain.hashes.last().copied().unwrap_or([0; 32]);
                let link = [
                    prev.as_slice(),
                    &diff.signed_content(&info.escrow_id),
                    &diff.user_sig,
                ]
                .concat();
                chain.hashes.push(sha256(&link));
                if !delta.is_empty() {
                    chain.warm.insert(nonce, delta);
                }
                chain.diffs.push(diff);
            }
            Err((reason, detail)) => {
                broken = true;
                chain.rejected.push(RejectedDiff {
                    host: host.clone(),
                    nonce,
                    reason,
                    detail,
                });
            }
        }
    }
    chain
}

type Verdict = Result<(Diff, Vec<crate::protocol::warm::WarmBinding>), (RejectReason, String)>;

/// One record at the session's next nonce.
async fn check(
    session: &mut Session,
    creator: &Address,
    record: DiffRecord,
    warm: &WarmKeyChecker,
) -> Verdict {
    let diff = record
        .diff
        .to_diff()
        .map_err(|e| (RejectReason::Undecodable, e.to_string()))?;
    let expected = session.nonce().saturating_add(1);
    if diff.nonce != expected {
        let detail = format!("expected nonce {expected}, got {}", diff.nonce);
        return Err((RejectReason::NonceGap, detail));
    }
    let escrow_id = session.info().escrow_id.clone();
    diff.verify_user_sig(&escrow_id, creator).map_err(|e| {
        (
            RejectReason::UserSig,
            format!("not signed by {creator}: {e}"),
        )
    })?;
    // Warm keys of finish proposers the cache does not know yet are asked of the chain first.
    for signer in session.mempool_signers_to_check(&diff.txs) {
        if signer.acceptance == Acceptance::Unresolved {
            if let CheckOutcome::Failed(e) = warm.check(&signer.validator, &signer.warm).await {
                let detail = format!("warm key {} not checkable: {e}", signer.warm);
                return Err((RejectReason::TxFails, detail));
            }
        }
    }
    let delta = session.replay(diff.clone()).map_err(|e| match e {
        ReplayFault::RootDiffers => (RejectReason::RootMismatch, e.to_string()),
        ReplayFault::Refused(_) | ReplayFault::TxFails { .. } => {
            (RejectReason::TxFails, e.to_string())
        }
    })?;
    Ok((diff, delta))
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
