//! Each rejection reason of one host's chain, on diffs signed for real.

use std::sync::Arc;

use super::*;
use crate::{
    clock::TokioClock,
    escrow::info::HostEndpoint,
    protocol::{
        crypto::SigningKey,
        proto::{DevshardTx, MsgConfirmStart, Tx},
        state::{SessionConfig, Slot},
        warm::WarmKeyMetrics,
        wire::DiffJson,
    },
};

fn info(creator: &SigningKey, hosts: &[SigningKey]) -> Arc<EscrowInfo> {
    Arc::new(EscrowInfo {
        escrow_id: "42".into(),
        creator: creator.address().clone(),
        model: "m".into(),
        amount: 10_000_000,
        config: SessionConfig::default_for_group(hosts.len()),
        group: (0u32..)
            .zip(hosts)
            .map(|(i, k)| Slot {
                slot_id: i,
                validator: k.address().clone(),
            })
            .collect(),
        hosts: (0u32..)
            .zip(hosts)
            .map(|(i, k)| HostEndpoint {
                address: k.address().clone(),
                base_url: format!("http://h{i}"),
                slots: vec![i],
                weight: 1,
            })
            .collect(),
        max_nonce: 20_000,
        route_prefix: "/v1/devshard".into(),
    })
}

fn checker() -> WarmKeyChecker {
    let metrics = WarmKeyMetrics::register(&prometheus::Registry::new()).unwrap();
    let log = slog::Logger::root(slog::Discard, slog::o!());
    WarmKeyChecker::rest(
        "http://127.0.0.1:9",
        TokioClock::new().shared(),
        metrics,
        log,
    )
}

fn record(d: &Diff) -> DiffRecord {
    DiffRecord {
        diff: DiffJson::from_diff(d),
        state_hash: d.post_state_root.clone(),
    }
}

/// Three honest diffs of the gateway's session.
fn honest(info: &Arc<EscrowInfo>, key: &SigningKey) -> Vec<Diff> {
    let mut s = Session::new(info.clone()).unwrap();
    (0..3)
        .map(|_| (*s.compose(Vec::new(), key).unwrap()).clone())
        .collect()
}

#[actix_rt::test]
async fn each_broken_link_is_named_and_ends_the_chain() {
    let gateway = SigningKey::derive("adopt-verify", 100);
    let hosts: Vec<SigningKey> = (0..3)
        .map(|i| SigningKey::derive("adopt-verify", i))
        .collect();
    let info = info(&gateway, &hosts);
    let host = hosts[0].address().clone();
    let diffs = honest(&info, &gateway);
    let warm = checker();
    let verify_with = |records: Vec<DiffRecord>| {
        let (info, host, warm) = (info.clone(), host.clone(), warm.clone());
        async move { verify(&info, &host, HostAnswer::Diffs(records), &warm).await }
    };

    let all = verify_with(diffs.iter().map(record).collect()).await;
    assert_eq!((all.verified_nonce(), all.rejected.len()), (3, 0));

    // A wrong root, signed by the creator itself: only the replay catches it.
    let wrong = Diff::sign(2, diffs[1].txs.clone(), "42", [7; 32], &gateway);
    let chain = verify_with(vec![record(&diffs[0]), record(&wrong), record(&diffs[2])]).await;
    let reasons: Vec<_> = chain.rejected.iter().map(|r| (r.nonce, r.reason)).collect();
    assert_eq!(
        reasons,
        [
            (2, RejectReason::RootMismatch),
            (3, RejectReason::AfterRejected)
        ]
    );
    assert_eq!(chain.verified_nonce(), 1);

    // Signed by someone else.
    let forged = Diff::sign(2, vec![], "42", [0; 32], &hosts[1]);
    let chain = verify_with(vec![record(&diffs[0]), record(&forged)]).await;
    assert_eq!(chain.rejected[0].reason, RejectReason::UserSig);

    // A gap.
    let chain = verify_with(vec![record(&diffs[0]), record(&diffs[2])]).await;
    assert_eq!(
        (chain.rejected[0].nonce, chain.rejected[0].reason),
        (3, RejectReason::NonceGap)
    );

    // A tx that does not apply (a confirmation of an inference that was never started).
    let confirm = DevshardTx::new(Tx::ConfirmStart(MsgConfirmStart {
        inference_id: 1,
        executor_sig: vec![1; 65],
        confirmed_at: 1,
    }));
    let bad_tx = Diff::sign(2, vec![confirm], "42", [0; 32], &gateway);
    let chain = verify_with(vec![record(&diffs[0]), record(&bad_tx)]).await;
    assert_eq!(chain.rejected[0].reason, RejectReason::TxFails);

    // Undecodable txs.
    let mut garbled = record(&diffs[1]);
    garbled.diff.txs = vec![0xff, 0xff];
    let chain = verify_with(vec![record(&diffs[0]), garbled]).await;
    assert_eq!(chain.rejected[0].reason, RejectReason::Undecodable);

    // No session (404) is the empty chain; a failure is not an answer.
    let empty = verify(&info, &host, HostAnswer::NoSession, &warm).await;
    assert!(empty.answered && empty.diffs.is_empty());
    let gone = verify(&info, &host, HostAnswer::Failed("refused".into()), &warm).await;
    assert!(!gone.answered);
}
