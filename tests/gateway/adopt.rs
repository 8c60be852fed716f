//! Adopting a live escrow (migration between gateways), over real HTTP against the simulated
//! network: gateway A serves, stops; gateway B, with an empty store, adopts the escrow from the
//! hosts' `GET …/diffs` and continues the same session.

use devshard_actors::protocol::crypto::SigningKey;
use devshard_gateway::sim::Faults;
use serde_json::{json, Value};

use crate::live::{self, admin_get, admin_post, chat, escrow_nonce};

const CHAT: &str = r#"{"messages":[{"role":"user","content":"carry on"}],"max_tokens":8}"#;
const ADOPT: &str = r#"{"escrow_id":"42","adopt":true}"#;

/// Serves `n` requests (each must succeed).
async fn serve(url: &str, n: usize) {
    for i in 0..n {
        let (status, _, body) = chat(url, CHAT).await;
        assert_eq!(
            status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

fn forging_from(nonce: u64) -> Faults {
    Faults {
        forge_diffs_from_nonce: Some(nonce),
        ..Faults::default()
    }
}

#[actix_rt::test]
async fn an_adopting_gateway_resumes_the_session_and_reports_the_lying_host() {
    let a = live::start("adopt-resume", 4, &[], |_| {}).await;
    serve(a.url(), 30).await;
    let last = escrow_nonce(a.url()).await;
    assert!(last >= 30, "A sequenced {last}");
    let liar = a.sim.hosts()[1].address.to_string();
    a.sim.set_faults(1, forging_from(5)).unwrap();

    let b = a.successor(&[]).await;
    let (status, _) = admin_get(b.url(), "/v1/admin/escrows/42").await;
    assert_eq!(status, 404, "B starts without the escrow");
    let (status, v) = admin_post(b.url(), "/v1/admin/escrows", ADOPT).await;
    assert_eq!(status, 201, "{v}");
    let adoption = &v["adoption"];
    assert_eq!(adoption["nonce"], json!(last), "{adoption}");
    assert_eq!(adoption["next_nonce"], json!(last + 1));
    assert_eq!(adoption["quorum"], json!({"weight": 3, "threshold": 3}));
    let rejected = adoption["rejected"].as_array().unwrap();
    assert!(!rejected.is_empty(), "{adoption}");
    assert!(
        rejected.iter().all(|r| r["host"] == json!(liar)),
        "{adoption}"
    );
    assert_eq!(
        (rejected[0]["nonce"].clone(), rejected[0]["reason"].clone()),
        (json!(5), json!("user_sig"))
    );
    assert!(rejected[1..]
        .iter()
        .all(|r| r["reason"] == json!("after_rejected")));
    let hosts = adoption["hosts"].as_array().unwrap();
    let agreeing: Vec<&Value> = hosts
        .iter()
        .filter(|h| h["agrees"] == json!(true))
        .collect();
    assert_eq!(agreeing.len(), 3, "{adoption}");
    assert_eq!(
        v["snapshot"]["nonce"],
        json!(last),
        "the actor restored the log"
    );

    // B continues the same session: its first diff is the next nonce, and every host applies
    // what B sends (the lying host only lies about its history).
    serve(b.url(), 8).await;
    let (status, sync) = admin_post(b.url(), "/v1/admin/escrows/42/sync", "{}").await;
    assert_eq!(status, 200, "{sync}");
    let now = sync["nonce"].as_u64().unwrap();
    assert!(now > last + 8 - 1, "B sequenced {now} after {last}");
    let views: Vec<_> = (0..4).map(|i| b.sim.host_view(i, "42").unwrap()).collect();
    for (i, view) in views.iter().enumerate() {
        assert_eq!(view.latest_nonce, now, "host {i}");
        assert_eq!(view.real_root, views[0].real_root, "host {i}");
        assert_eq!(view.diffs.len() as u64, now, "host {i} holds one chain");
    }
    let (status, again) = admin_post(b.url(), "/v1/admin/escrows", ADOPT).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "escrow_already_registered");
    let (_, metrics) = live::metrics(b.url()).await;
    assert!(
        metrics.contains(r#"devshard_escrow_adoptions_total{result="adopted"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"devshard_escrow_adopt_rejected_diffs_total{reason="user_sig"} 1"#),
        "{metrics}"
    );
    b.stop().await;
}

#[actix_rt::test]
async fn without_a_quorum_of_agreeing_hosts_nothing_is_adopted() {
    let a = live::start("adopt-no-quorum", 4, &[], |_| {}).await;
    serve(a.url(), 6).await;
    a.sim.set_faults(0, forging_from(2)).unwrap();
    a.sim.set_faults(3, forging_from(3)).unwrap();
    let b = a.successor(&[]).await;
    let (status, v) = admin_post(b.url(), "/v1/admin/escrows", ADOPT).await;
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["code"], "adopt_no_quorum");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("2 of the 3 slots needed"), "{message}");
    let rejected = v["rejected"].as_array().unwrap();
    let liars = [0, 3].map(|i| json!(b.sim.hosts()[i].address.to_string()));
    assert!(rejected.iter().all(|r| liars.contains(&r["host"])), "{v}");
    assert!(rejected
        .iter()
        .any(|r| r["host"] == liars[0] && r["nonce"] == json!(2)));
    let (status, _) = admin_get(b.url(), "/v1/admin/escrows/42").await;
    assert_eq!(status, 404, "nothing registered");
    b.stop().await;
}

#[actix_rt::test]
async fn an_escrow_another_key_created_is_not_adopted() {
    let a = live::start("adopt-other-key", 3, &[], |_| {}).await;
    serve(a.url(), 2).await;
    let other = SigningKey::derive("adopt-other-key", 7).secret_hex();
    let b = a
        .successor(&[("DEVSHARD_PRIVATE_KEY", other.as_str())])
        .await;
    let (status, v) = admin_post(b.url(), "/v1/admin/escrows", ADOPT).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "escrow_creator_mismatch");
    let diffs: u64 = (0..3).map(|i| b.sim.counters(i).unwrap().diffs).sum();
    assert_eq!(diffs, 0, "no host was asked for its diffs");
    b.stop().await;
}
