//! The `forge_diffs_from_nonce` knob: a lying host's `GET …/diffs` (what an adopting gateway
//! rebuilds a session from), while its own state stays honest.

use devshard_actors::protocol::{crypto::recover_address, wire::DiffRecord};
use devshard_gateway::sim::Faults;

use crate::client::{config, start, Session};

const PROMPT: &[u8] = br#"{"max_tokens":4,"messages":[{"role":"user","content":"history"}]}"#;

#[actix_rt::test]
async fn forge_diffs_from_nonce_serves_rewritten_diffs_signed_by_the_host() {
    tokio::time::pause();
    let net = start(config(3)).await;
    let mut s = Session::new(&net, "42");
    // Nonces 1..=6 all reach the executor of nonce 6 (catch-up carries every diff).
    for _ in 0..6 {
        let (_, out) = s.infer(vec![], PROMPT).await;
        assert_eq!(out.status, 200);
    }
    let (liar, last) = (s.executor(6), 6u64);
    let lying = Faults {
        forge_diffs_from_nonce: Some(2),
        ..Faults::default()
    };
    net.set_faults(liar, lying).unwrap();
    let (status, body) = s.get(liar, &format!("diffs?from=1&to={last}")).await;
    assert_eq!(status, 200, "{body}");
    let served: Vec<DiffRecord> = serde_json::from_value(body).unwrap();
    assert_eq!(served.len() as u64, last);
    let creator = s.key.address().clone();
    let host_key = net.hosts()[liar].address.clone();
    for (record, ours) in served.iter().zip(&s.diffs) {
        let diff = record.diff.to_diff().unwrap();
        let signer = recover_address(&diff.signed_content("42"), &diff.user_sig).unwrap();
        if diff.nonce < 2 {
            assert_eq!((&diff, &signer), (ours, &creator), "nonce {}", diff.nonce);
        } else {
            assert_eq!(signer, host_key, "nonce {} signed by the host", diff.nonce);
            assert_ne!(diff.post_state_root, ours.post_state_root);
            assert_eq!(diff.txs, ours.txs);
        }
    }
    // The host itself still holds the true chain: cleared, it serves it again.
    net.clear_faults(liar).unwrap();
    let (_, body) = s.get(liar, &format!("diffs?from=2&to={last}")).await;
    let served: Vec<DiffRecord> = serde_json::from_value(body).unwrap();
    assert_eq!(served[0].diff.to_diff().unwrap(), s.diffs[1]);
}
