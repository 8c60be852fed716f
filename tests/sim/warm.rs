//! Warm keys in the simulator (docs/lifecycle.md §5): warm hosts sign with their granted key, the
//! chain serves the grants for both type URLs, hosts bind keys in their own state machines, and
//! the fault knobs (ungranted key, grants endpoint unreachable or slow, revocation after binding)
//! behave as a real network would.

use std::{sync::Arc, time::Duration};

use devshard_actors::protocol::{
    crypto::{recover_address, Address},
    diff::Diff,
    proto::{self, DevshardTx, Tx},
    state::{finish_unsigned_bytes, receipt_content, state_sig_content, StateError},
    warm::{
        grantees_path, parse_grantees, GrantAnswer, WarmKeyResolver, TYPE_URL_CLAIM_REWARDS,
        TYPE_URL_START_INFERENCE,
    },
};
use devshard_gateway::sim::{
    default_type_url, ungranted_key, warm_key, Faults, Grant, GrantsFault, WarmMode,
};
use serde_json::json;

use crate::client::{config, http, start, Session, TestNet};

const PROMPT: &[u8] =
    br#"{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

/// The test gateway's step 4: the chain's grants as they were when it was built.
#[derive(Debug)]
struct Granted(Vec<Grant>);

impl WarmKeyResolver for Granted {
    fn resolve(&self, validator: &Address, warm: &Address) -> GrantAnswer {
        if self
            .0
            .iter()
            .any(|g| &g.validator == validator && &g.grantee == warm && !g.revoked)
        {
            GrantAnswer::Granted
        } else {
            GrantAnswer::NotGranted
        }
    }
}

fn warm_config(hosts: usize) -> devshard_gateway::sim::SimConfig {
    let mut cfg = config(hosts);
    cfg.warm_keys = WarmMode::All;
    cfg
}

fn session(net: &TestNet) -> Session {
    let mut s = Session::new(net, "42");
    s.sm.set_warm_resolver(Arc::new(Granted(net.grants())));
    s
}

/// `GET` on the chain API: status and body.
async fn chain_get(net: &TestNet, path: &str) -> Result<(u16, Vec<u8>), String> {
    let mut resp = http()
        .get(format!("{}{path}", net.chain_url()))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body = resp.body().await.map_err(|e| e.to_string())?;
    Ok((resp.status().as_u16(), body.to_vec()))
}

/// Sends every diff to every host (catch-up without payload); each must accept.
async fn sync_all(s: &Session, hosts: usize) {
    let nonce = s.sm.latest_nonce();
    for h in 0..hosts {
        let body = Session::body(s.diffs_after(0), nonce, None);
        let resp = s.post(h, "chat/completions", body).await.unwrap();
        let out = crate::client::read_stream(resp).await;
        assert_eq!(out.status, 200, "host {h}: {}", out.message());
    }
}

/// One inference on warm hosts, its ConfirmStart sequenced and synced everywhere.
async fn bound_inference(net: &TestNet, s: &mut Session) -> (u64, usize, Vec<DevshardTx>) {
    let (nonce, out) = s.infer(vec![], PROMPT).await;
    assert_eq!(out.status, 200, "{}", out.message());
    let executor = s.executor(nonce);
    let confirm = Session::confirm_from(out.receipt().unwrap(), nonce);
    let next = s.next_nonce();
    let be =
        s.sm.clone()
            .apply_best_effort(next, vec![confirm.clone()])
            .unwrap();
    assert_eq!(
        be.warm_delta.len(),
        1,
        "the receipt binds the executor's slot"
    );
    s.compose(vec![confirm]);
    sync_all(s, net.hosts().len()).await;
    (nonce, executor, out.meta().cloned().unwrap_or_default())
}

#[actix_rt::test]
async fn warm_hosts_sign_with_their_warm_key_and_bind_it_like_the_gateway() {
    tokio::time::pause();
    let net = start(warm_config(4)).await;
    let seed = net.config().seed.clone();
    let mut s = session(&net);
    let (start_tx, payload) = s.start_tx(PROMPT, 16);
    let diff = s.compose(vec![start_tx.clone()]);
    let executor = s.executor(diff.nonce);
    let body = Session::body(s.diffs_after(0), diff.nonce, Some(payload));
    let out =
        crate::client::read_stream(s.post(executor, "chat/completions", body).await.unwrap()).await;
    assert_eq!(out.status, 200);
    let receipt = out.receipt().unwrap().clone();
    let Some(Tx::StartInference(start_msg)) = &start_tx.tx else {
        panic!()
    };
    let warm = warm_key(&seed, executor).address().clone();
    let content = receipt_content(start_msg, "42", receipt.confirmed_at.unwrap());
    let signer = recover_address(&proto::encode(&content), receipt.receipt.as_ref().unwrap());
    assert_eq!(
        signer.unwrap(),
        warm,
        "the receipt is signed with the warm key"
    );
    let state = state_sig_content(receipt.state_hash.as_ref().unwrap(), "42", receipt.nonce);
    assert_eq!(
        recover_address(&state, receipt.state_sig.as_ref().unwrap()).unwrap(),
        warm
    );
    let finish = out
        .meta()
        .unwrap()
        .iter()
        .find_map(|tx| match &tx.tx {
            Some(Tx::FinishInference(f)) => Some(f.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        recover_address(&finish_unsigned_bytes(&finish), &finish.proposer_sig).unwrap(),
        warm
    );

    // The chain lists the grant under the host's type URL only.
    let validator = net.hosts()[executor].address.clone();
    let own = default_type_url(executor);
    let other = if own == TYPE_URL_CLAIM_REWARDS {
        TYPE_URL_START_INFERENCE
    } else {
        TYPE_URL_CLAIM_REWARDS
    };
    let (status, body) = chain_get(&net, &grantees_path(&validator, own))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(parse_grantees(&body).unwrap(), std::slice::from_ref(&warm));
    let (_, body) = chain_get(&net, &grantees_path(&validator, other))
        .await
        .unwrap();
    assert!(parse_grantees(&body).unwrap().is_empty());

    // The ConfirmStart binds the slot: every host binds the same key at the same nonce.
    s.compose(vec![Session::confirm_from(&receipt, diff.nonce)]);
    let slot = (diff.nonce % 4) as u32;
    assert_eq!(s.sm.warm_keys().get(&slot), Some(&warm));
    sync_all(&s, 4).await;
    for h in 0..4 {
        let view = net.host_view(h, "42").unwrap();
        assert_eq!(view.state.warm_keys(), s.sm.warm_keys(), "host {h}");
        assert_eq!(view.state_root, s.sm.state_root(), "host {h}");
    }
}

#[actix_rt::test]
async fn a_host_signing_with_an_ungranted_key_is_rejected_by_every_other_host() {
    tokio::time::pause();
    let net = start(warm_config(4)).await;
    let mut s = session(&net);
    let executor = s.executor(s.next_nonce());
    net.set_faults(
        executor,
        Faults {
            sign_with_ungranted_key: true,
            ..Faults::default()
        },
    )
    .unwrap();
    let (nonce, out) = s.infer(vec![], PROMPT).await;
    assert_eq!(out.status, 200);
    let receipt = out.receipt().unwrap().clone();
    let confirm = Session::confirm_from(&receipt, nonce);
    let Some(Tx::ConfirmStart(c)) = &confirm.tx else {
        panic!()
    };
    let rec = s.sm.record(nonce).unwrap();
    let start = devshard_actors::protocol::proto::MsgStartInference {
        inference_id: nonce,
        prompt_hash: rec.prompt_hash.to_vec(),
        model: rec.model.to_string(),
        input_length: rec.input_length,
        max_tokens: rec.max_tokens,
        started_at: rec.started_at,
    };
    let content = receipt_content(&start, "42", c.confirmed_at);
    let signer = recover_address(&proto::encode(&content), &c.executor_sig).unwrap();
    let seed = net.config().seed.clone();
    assert_eq!(signer, *ungranted_key(&seed, executor).address());
    // A gateway that checks the grants skips it ...
    let be =
        s.sm.clone()
            .apply_best_effort(nonce + 1, vec![confirm.clone()])
            .unwrap();
    assert!(matches!(
        be.skipped.first(),
        Some((_, StateError::InvalidExecutorSig(_)))
    ));
    // ... and a diff that carries it anyway (root computed by a machine that trusts every key)
    // is refused by every host: they check the chain themselves.
    #[derive(Debug)]
    struct Everyone;
    impl WarmKeyResolver for Everyone {
        fn resolve(&self, _: &Address, _: &Address) -> GrantAnswer {
            GrantAnswer::Granted
        }
    }
    let mut lenient = s.sm.clone().with_warm_resolver(Arc::new(Everyone));
    let be = lenient.apply_best_effort(nonce + 1, vec![confirm]).unwrap();
    assert_eq!(be.applied.len(), 1);
    let bad = Diff::sign(nonce + 1, be.applied, "42", be.root, &s.key);
    let mut diffs = s.diffs_after(0);
    diffs.push(devshard_actors::protocol::wire::DiffJson::from_diff(&bad));
    for h in (0..4).filter(|h| *h != executor) {
        let body = Session::body(diffs.clone(), nonce + 1, None);
        let out =
            crate::client::read_stream(s.post(h, "chat/completions", body).await.unwrap()).await;
        assert_eq!(out.status, 500, "host {h}");
        assert!(
            out.message().contains("invalid executor signature"),
            "{}",
            out.message()
        );
    }
}

#[actix_rt::test]
async fn the_grants_endpoint_can_be_unreachable_or_answer_an_error() {
    tokio::time::pause();
    let net = start(warm_config(2)).await;
    let path = grantees_path(&net.hosts()[0].address, TYPE_URL_CLAIM_REWARDS);
    net.set_grants_fault(GrantsFault {
        unreachable: true,
        ..GrantsFault::default()
    });
    assert!(
        chain_get(&net, &path).await.is_err(),
        "the connection is cut"
    );
    net.set_grants_fault(GrantsFault {
        status: Some(503),
        ..GrantsFault::default()
    });
    assert_eq!(chain_get(&net, &path).await.unwrap().0, 503);
    // The rest of the chain API is unaffected, and every grants query is logged.
    assert_eq!(chain_get(&net, "/v1/epochs/latest").await.unwrap().0, 200);
    let logged = net.chain_requests();
    assert_eq!(
        logged.recent.iter().filter(|r| r.path == path).count(),
        2,
        "{:?}",
        logged.recent
    );
    net.set_grants_fault(GrantsFault::default());
    assert_eq!(chain_get(&net, &path).await.unwrap().0, 200);
}

#[actix_rt::test]
async fn a_slow_grants_endpoint_answers_late_in_virtual_time() {
    tokio::time::pause();
    let net = start(warm_config(2)).await;
    let path = grantees_path(&net.hosts()[0].address, TYPE_URL_CLAIM_REWARDS);
    net.set_grants_fault(GrantsFault {
        delay_ms: Some(7_000),
        ..GrantsFault::default()
    });
    let t0 = tokio::time::Instant::now();
    let (status, body) = chain_get(&net, &path).await.unwrap();
    assert_eq!(status, 200);
    assert!(t0.elapsed() >= Duration::from_millis(7_000));
    assert_eq!(parse_grantees(&body).unwrap().len(), 1);
}

#[actix_rt::test]
async fn a_grant_revoked_after_binding_changes_nothing_for_the_hosts() {
    tokio::time::pause();
    let net = start(warm_config(4)).await;
    let mut s = session(&net);
    let (nonce, executor, meta) = bound_inference(&net, &mut s).await;
    let (status, v) = crate::client::control_call(
        &net,
        "POST",
        "/sim/warm/grants/revoke",
        Some(json!({"host": executor})),
    )
    .await;
    assert_eq!((status, v["changed"].as_u64()), (200, Some(1)));
    let validator = net.hosts()[executor].address.clone();
    let (_, body) = chain_get(&net, &grantees_path(&validator, default_type_url(executor)))
        .await
        .unwrap();
    assert!(
        parse_grantees(&body).unwrap().is_empty(),
        "revoked on chain"
    );
    // The finish signed by the (bound, now revoked) warm key still applies everywhere.
    let finish: Vec<DevshardTx> = meta
        .into_iter()
        .filter(|tx| matches!(&tx.tx, Some(Tx::FinishInference(f)) if f.inference_id == nonce))
        .collect();
    assert_eq!(finish.len(), 1);
    s.sm.set_warm_resolver(Arc::new(Granted(net.grants())));
    s.compose(finish);
    sync_all(&s, 4).await;
    for h in 0..4 {
        let view = net.host_view(h, "42").unwrap();
        assert_eq!(view.state_root, s.sm.state_root(), "host {h}");
        assert_eq!(view.state.warm_keys(), s.sm.warm_keys(), "host {h}");
    }
    assert_eq!(
        s.sm.record(nonce).unwrap().status,
        devshard_actors::protocol::state::InferenceStatus::Finished
    );
}

#[actix_rt::test]
async fn grants_are_added_listed_and_expire_through_the_control_api() {
    tokio::time::pause();
    let mut cfg = config(3);
    cfg.warm_keys = WarmMode::Count(1);
    let net = start(cfg).await;
    assert!(net.hosts()[0].warm_key.is_some() && net.hosts()[1].warm_key.is_none());
    let (_, list) = crate::client::control_call(&net, "GET", "/sim/warm/grants", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (status, _) = crate::client::control_call(
        &net,
        "POST",
        "/sim/warm/grants",
        Some(json!({"host": 2, "expires_in_ms": 1000})),
    )
    .await;
    assert_eq!(status, 200);
    let path = grantees_path(&net.hosts()[2].address, default_type_url(2));
    let (_, body) = chain_get(&net, &path).await.unwrap();
    assert_eq!(parse_grantees(&body).unwrap().len(), 1);
    tokio::time::sleep(Duration::from_millis(1_001)).await;
    let (_, body) = chain_get(&net, &path).await.unwrap();
    assert!(parse_grantees(&body).unwrap().is_empty(), "expired");
    let (status, _) =
        crate::client::control_call(&net, "POST", "/sim/warm/grants", Some(json!({"nobody": 1})))
            .await;
    assert_eq!(status, 400);
    let (_, v) = crate::client::control_call(
        &net,
        "POST",
        "/sim/warm/grants/expire",
        Some(json!({"host": 0})),
    )
    .await;
    assert_eq!(v["changed"], 1);
    let (_, list) = crate::client::control_call(&net, "GET", "/sim/warm/grants", None).await;
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|g| g["active"] == false));
}
