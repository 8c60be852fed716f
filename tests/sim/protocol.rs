//! The protocol paths of a simulated host: a signed inference end to end, catch-up, state
//! agreement over many nonces, and the upstream rejections of bad input.

use devshard_actors::protocol::{
    crypto::{recover_address, verify},
    proto::{self, Tx},
    sse::HostEvent,
    state::{finish_unsigned_bytes, receipt_content, state_sig_content, validation_unsigned_bytes},
};

use crate::client::{config, start, End, Session};

const PROMPT: &[u8] = br#"{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

#[actix_rt::test]
async fn signed_inference_round_trip_verifies_with_protocol_code() {
    tokio::time::pause();
    let net = start(config(4)).await;
    let mut s = Session::new(&net, "42");
    let (start_tx, payload) = s.start_tx(PROMPT, 16);
    let diff = s.compose(vec![start_tx.clone()]);
    let executor = s.executor(diff.nonce);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let resp = s.post(executor, "chat/completions", body).await.unwrap();
    let out = crate::client::read_stream(resp).await;

    assert_eq!(out.status, 200);
    assert_eq!(out.content_type, "text/event-stream");
    assert_eq!(out.end, End::Eof);
    // Event order: receipt, chunks, [DONE], meta.
    assert!(matches!(out.events.first(), Some(HostEvent::Receipt(_))), "{:?}", out.events);
    let done_at = out.events.iter().position(|e| *e == HostEvent::Done).unwrap();
    assert!(matches!(out.events.last(), Some(HostEvent::Meta(_))));
    assert_eq!(done_at, out.events.len() - 2);
    let chunks = out.chunks();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks.len(), 1 + 5 + 1, "role, 5 tokens, finish");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 5);
    assert!(!out.text().is_empty());

    let exec_addr = net.hosts()[executor].address.clone();
    let receipt = out.receipt().unwrap().clone();
    assert_eq!(receipt.nonce, 1);
    // The receipt over ExecutorReceiptContent.
    let Some(Tx::StartInference(start_msg)) = &start_tx.tx else { panic!() };
    let content = receipt_content(start_msg, "42", receipt.confirmed_at.unwrap());
    verify(&proto::encode(&content), receipt.receipt.as_ref().unwrap(), &exec_addr).unwrap();
    // The state signature over our own root.
    assert_eq!(receipt.state_hash.as_deref(), Some(s.sm.state_root().as_slice()));
    let sig_content = state_sig_content(&s.sm.state_root(), "42", 1);
    verify(&sig_content, receipt.state_sig.as_ref().unwrap(), &exec_addr).unwrap();
    // The finish in the meta, signed by the executor, hashing the data payloads.
    let meta = out.meta().unwrap();
    let finish = meta
        .iter()
        .find_map(|t| match &t.tx {
            Some(Tx::FinishInference(f)) => Some(f.clone()),
            _ => None,
        })
        .unwrap();
    verify(&finish_unsigned_bytes(&finish), &finish.proposer_sig, &exec_addr).unwrap();
    let payloads: Vec<u8> = out
        .events
        .iter()
        .filter_map(|e| match e {
            HostEvent::Chunk(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(finish.response_hash, devshard_actors::protocol::crypto::sha256(&payloads));
    assert_eq!(finish.output_tokens, 5);
    assert!(meta.iter().any(|t| matches!(t.tx, Some(Tx::ConfirmStart(_)))));

    // The next diff carries ConfirmStart + Finish; the state machine accepts both, and so
    // does the host (same root), which then drops them from its mempool.
    let txs = vec![Session::confirm_from(&receipt, 1), meta.iter().find(|t| matches!(t.tx, Some(Tx::FinishInference(_)))).unwrap().clone()];
    let next = s.compose(txs);
    assert_eq!(next.txs.len(), 2, "both txs applied locally");
    let body = Session::body(s.diffs_after(1), next.nonce, None);
    let out = crate::client::read_stream(s.post(executor, "chat/completions", body).await.unwrap()).await;
    assert_eq!(out.status, 200);
    assert_eq!(out.receipt().unwrap().state_hash.as_deref(), Some(s.sm.state_root().as_slice()));
    assert!(!out.has_done(), "no inference without payload");
    assert!(out.meta().unwrap().is_empty());
    let view = net.host_view(executor, "42").unwrap();
    assert_eq!(view.latest_nonce, 2);
    assert_eq!(view.state_root, s.sm.state_root());
    let _ = (recover_address, validation_unsigned_bytes);
}
