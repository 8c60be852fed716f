//! The protocol paths of a simulated host: a signed inference end to end, catch-up, state
//! agreement over many nonces, and the upstream rejections of bad input.

use devshard_actors::protocol::{
    crypto::{recover_address, verify},
    proto::{self, Tx},
    sse::HostEvent,
    state::{finish_unsigned_bytes, receipt_content, state_sig_content, validation_unsigned_bytes},
};

use crate::client::{config, start, End, Session};

const PROMPT: &[u8] =
    br#"{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

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
    assert!(
        matches!(out.events.first(), Some(HostEvent::Receipt(_))),
        "{:?}",
        out.events
    );
    let done_at = out
        .events
        .iter()
        .position(|e| *e == HostEvent::Done)
        .unwrap();
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
    let Some(Tx::StartInference(start_msg)) = &start_tx.tx else {
        panic!()
    };
    let content = receipt_content(start_msg, "42", receipt.confirmed_at.unwrap());
    verify(
        &proto::encode(&content),
        receipt.receipt.as_ref().unwrap(),
        &exec_addr,
    )
    .unwrap();
    // The state signature over our own root.
    assert_eq!(
        receipt.state_hash.as_deref(),
        Some(s.sm.state_root().as_slice())
    );
    let sig_content = state_sig_content(&s.sm.state_root(), "42", 1);
    verify(
        &sig_content,
        receipt.state_sig.as_ref().unwrap(),
        &exec_addr,
    )
    .unwrap();
    // The finish in the meta, signed by the executor, hashing the data payloads.
    let meta = out.meta().unwrap();
    let finish = meta
        .iter()
        .find_map(|t| match &t.tx {
            Some(Tx::FinishInference(f)) => Some(f.clone()),
            _ => None,
        })
        .unwrap();
    verify(
        &finish_unsigned_bytes(&finish),
        &finish.proposer_sig,
        &exec_addr,
    )
    .unwrap();
    let payloads: Vec<u8> = out
        .events
        .iter()
        .filter_map(|e| match e {
            HostEvent::Chunk(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        finish.response_hash,
        devshard_actors::protocol::crypto::sha256(&payloads)
    );
    assert_eq!(finish.output_tokens, 5);
    assert!(meta
        .iter()
        .any(|t| matches!(t.tx, Some(Tx::ConfirmStart(_)))));

    // The next diff carries ConfirmStart + Finish; the state machine accepts both, and so
    // does the host (same root), which then drops them from its mempool.
    let txs = vec![
        Session::confirm_from(&receipt, 1),
        meta.iter()
            .find(|t| matches!(t.tx, Some(Tx::FinishInference(_))))
            .unwrap()
            .clone(),
    ];
    let next = s.compose(txs);
    assert_eq!(next.txs.len(), 2, "both txs applied locally");
    let body = Session::body(s.diffs_after(1), next.nonce, None);
    let out =
        crate::client::read_stream(s.post(executor, "chat/completions", body).await.unwrap()).await;
    assert_eq!(out.status, 200);
    assert_eq!(
        out.receipt().unwrap().state_hash.as_deref(),
        Some(s.sm.state_root().as_slice())
    );
    assert!(!out.has_done(), "no inference without payload");
    assert!(out.meta().unwrap().is_empty());
    let view = net.host_view(executor, "42").unwrap();
    assert_eq!(view.latest_nonce, 2);
    assert_eq!(view.state_root, s.sm.state_root());
}

/// Plays a gateway over many nonces: catch-up from each host's sync nonce, pending txs from
/// receipts and metas, validations from non-executors. Every host ends on our root.
#[actix_rt::test]
async fn hosts_agree_over_many_nonces_with_catch_up_and_validations() {
    tokio::time::pause();
    let mut cfg = config(4);
    cfg.validation_rate = 1.0;
    let net = start(cfg).await;
    let mut s = Session::new(&net, "42");
    let mut synced = [0u64; 4];
    let mut pending: Vec<proto::DevshardTx> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..12 {
        let prompt =
            format!(r#"{{"stream":true,"messages":[{{"role":"user","content":"q{i}"}}]}}"#);
        let (diff, payload) =
            s.compose_inference(std::mem::take(&mut pending), prompt.as_bytes(), 16);
        let host = s.executor(diff.nonce);
        let body = Session::body(s.diffs_after(synced[host]), diff.nonce, Some(payload));
        let out =
            crate::client::read_stream(s.post(host, "chat/completions", body).await.unwrap()).await;
        assert_eq!(out.status, 200, "{}", String::from_utf8_lossy(&out.raw));
        let r = out.receipt().unwrap();
        assert_eq!(r.nonce, diff.nonce);
        assert_eq!(
            r.state_hash.as_deref(),
            Some(s.sm.state_root().as_slice()),
            "nonce {}",
            diff.nonce
        );
        synced[host] = r.nonce;
        let mut fresh = vec![Session::confirm_from(r, diff.nonce)];
        fresh.extend(out.meta().unwrap().iter().cloned());
        for tx in fresh {
            if seen.insert(proto::encode(&tx)) {
                pending.push(tx);
            }
        }
    }
    // Flush pending txs and bring every host up to date.
    for _ in 0..2 {
        s.compose(std::mem::take(&mut pending));
    }
    for (host, synced) in synced.into_iter().enumerate() {
        let last = s.sm.latest_nonce();
        let body = Session::body(s.diffs_after(synced), last, None);
        let out =
            crate::client::read_stream(s.post(host, "chat/completions", body).await.unwrap()).await;
        assert_eq!(out.status, 200);
        assert_eq!(out.receipt().unwrap().nonce, last);
        let view = net.host_view(host, "42").unwrap();
        assert_eq!(view.state_root, s.sm.state_root(), "host {host}");
        // Left over: only validations of finishes sequenced by the final flush.
        assert!(
            view.mempool
                .iter()
                .all(|t| matches!(t.tx, Some(Tx::Validation(_)))),
            "host {host}: {:?}",
            view.mempool
        );
    }
    // Validations from non-executors were applied.
    let validated = s.sm.records().filter(|r| r.validated_by != 0).count();
    assert!(
        validated > 0,
        "validations rode in metas and were sequenced"
    );
    let v = s
        .diffs
        .iter()
        .flat_map(|d| &d.txs)
        .find_map(|t| match &t.tx {
            Some(Tx::Validation(v)) => Some(v.clone()),
            _ => None,
        });
    let v = v.unwrap();
    let validator = &net.escrow("42").unwrap().slots[v.validator_slot as usize];
    assert_eq!(
        recover_address(&validation_unsigned_bytes(&v), &v.proposer_sig).unwrap(),
        *validator
    );
}

#[actix_rt::test]
async fn non_stream_prompt_gets_one_completion_then_done() {
    tokio::time::pause();
    let net = start(config(3)).await;
    let mut s = Session::new(&net, "42");
    let (nonce, out) = s
        .infer(vec![], br#"{"messages":[{"role":"user","content":"x"}]}"#)
        .await;
    let chunks = out.chunks();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0]["object"], "chat.completion");
    assert_eq!(chunks[0]["usage"]["completion_tokens"], 5);
    assert!(out.has_done());
    let finish = out.meta().unwrap().iter().find_map(|t| match &t.tx {
        Some(Tx::FinishInference(f)) if f.inference_id == nonce => Some(f.clone()),
        _ => None,
    });
    let body = match &out.events[1] {
        HostEvent::Chunk(b) => b.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        finish.unwrap().response_hash,
        devshard_actors::protocol::crypto::sha256(&body)
    );
}

#[actix_rt::test]
async fn a_retry_of_the_same_nonce_replays_the_cached_answer() {
    tokio::time::pause();
    let net = start(config(3)).await;
    let mut s = Session::new(&net, "42");
    let (diff, payload) = s.compose_inference(vec![], PROMPT, 16);
    let host = s.executor(diff.nonce);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let first = crate::client::read_stream(
        s.post(host, "chat/completions", body.clone())
            .await
            .unwrap(),
    )
    .await;
    let again =
        crate::client::read_stream(s.post(host, "chat/completions", body).await.unwrap()).await;
    assert_eq!(first.text(), again.text());
    assert_eq!(
        first.receipt().unwrap().receipt,
        again.receipt().unwrap().receipt
    );
    assert!(again.has_done() && again.meta().is_some());
    assert_eq!(net.host_view(host, "42").unwrap().latest_nonce, 1);
}

#[actix_rt::test]
async fn multi_slot_hosts_sign_for_every_slot_and_gets_serve_the_log() {
    tokio::time::pause();
    let mut cfg = config(3);
    cfg.slot_hosts = Some(vec![0, 1, 2, 0]);
    let net = start(cfg).await;
    let mut s = Session::new(&net, "42");
    assert_eq!(s.executor(2), 2);
    assert_eq!(s.executor(3), 0, "slot 3 belongs to host 0");
    for _ in 0..4 {
        s.compose(vec![]);
    }
    let body = Session::body(s.diffs_after(0), 4, None);
    let out = crate::client::read_stream(s.post(0, "chat/completions", body).await.unwrap()).await;
    assert_eq!(out.receipt().unwrap().nonce, 4);
    let (status, sigs) = s.get(0, "signatures?nonce=4").await;
    assert_eq!(status, 200);
    let map = sigs["signatures"].as_object().unwrap();
    assert_eq!(map.keys().collect::<Vec<_>>(), ["0", "3"]);
    let (_, none) = s.get(0, "signatures?nonce=2").await;
    assert!(none["signatures"].is_null(), "never signed at 2");
    let (status, _) = s.get(0, "signatures?nonce=x").await;
    assert_eq!(status, 400);
    let (status, diffs) = s.get(0, "diffs?from=2&to=3").await;
    assert_eq!(status, 200);
    let list = diffs.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["diff"]["nonce"], 2);
    let rec: devshard_actors::protocol::wire::DiffRecord =
        serde_json::from_value(list[1].clone()).unwrap();
    assert_eq!(rec.diff.to_diff().unwrap(), s.diffs[2]);
    let (status, mempool) = s.get(0, "mempool").await;
    assert_eq!((status, mempool), (200, serde_json::json!({"txs": []})));
}

#[actix_rt::test]
async fn escrows_over_the_same_hosts_are_independent() {
    tokio::time::pause();
    let mut cfg = config(2);
    cfg.escrow_ids = vec!["42".into(), "43".into()];
    let net = start(cfg).await;
    let mut a = Session::new(&net, "42");
    let mut b = Session::new(&net, "43");
    let (_, out) = a.infer(vec![], PROMPT).await;
    assert_eq!(out.status, 200);
    let (_, out) = b.infer(vec![], PROMPT).await;
    assert_eq!(out.status, 200);
    assert_eq!(net.host_view(1, "42").unwrap().latest_nonce, 1);
    assert_eq!(net.host_view(1, "43").unwrap().latest_nonce, 1);
    // A diff of escrow 42 delivered to escrow 43 fails its signature check there.
    let d = a.compose(vec![]);
    let body = Session::body(
        vec![devshard_actors::protocol::wire::DiffJson::from_diff(&d)],
        d.nonce,
        None,
    );
    let out = crate::client::read_stream(b.post(1, "chat/completions", body).await.unwrap()).await;
    assert_eq!(out.status, 500);
    assert!(
        out.message()
            .starts_with("apply diff nonce 2: invalid user signature"),
        "{}",
        out.message()
    );
}

#[actix_rt::test]
async fn the_plain_openai_endpoint_streams_and_answers() {
    tokio::time::pause();
    let net = start(config(1)).await;
    let client = crate::client::http();
    let url = format!("{}/v1/chat/completions", net.hosts()[0].url);
    let resp = client
        .post(&url)
        .send_body(r#"{"stream":true,"max_tokens":3}"#)
        .await
        .unwrap();
    let out = crate::client::read_stream(resp).await;
    assert_eq!(out.content_type, "text/event-stream");
    assert_eq!(out.chunks().len(), 1 + 3 + 1);
    assert!(out.has_done() && out.receipt().is_none() && out.meta().is_none());
    let mut resp = client
        .post(&url)
        .send_body(r#"{"messages":[]}"#)
        .await
        .unwrap();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["usage"]["completion_tokens"], 5);
    let resp = client.post(&url).send_body("{nope").await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(net.counters(0).unwrap().openai, 3);
}
