//! TLS to hosts: every host of the escrow behind a real TLS endpoint (a certificate made by the
//! test). Trusted through `ca_file`, streaming and non-streaming answers are served; with an
//! untrusted certificate the operator gets a clear error naming `ca_file`, and no host is
//! struck (a configuration problem, not a host fault).

use std::sync::Arc;

use devshard_actors::{escrow::EscrowConfig, outcome::OutcomeClass, store::MemoryStore};
use devshard_gateway::sim::{Profile, SimConfig};

use super::{
    harness::{Answer, Harness},
    tls_proxy::{authority, https_proxy, TestCa},
};

fn sim(seed: &str) -> SimConfig {
    let mut cfg = SimConfig::with_seed(seed);
    cfg.hosts = 3;
    cfg.profile = Profile::Zero;
    cfg
}

/// A harness whose escrow reaches every host through an `https://` proxy signed by `ca`.
async fn behind_tls(seed: &str, ca: &TestCa) -> Harness {
    Harness::start_mapped(
        sim(seed),
        Arc::new(MemoryStore::new()),
        EscrowConfig::default(),
        |_, mut info| async move {
            for h in &mut info.hosts {
                h.base_url = https_proxy(ca, &authority(&h.base_url)).await;
            }
            info
        },
    )
    .await
}

#[actix_rt::test]
async fn hosts_served_over_https_with_a_trusted_ca_file() {
    let ca = TestCa::new("hosts-trusted");
    devshard_actors::tls::install_ca_file(&ca.pem_file).unwrap();
    let h = behind_tls("tls-hosts", &ca).await;
    for stream in [true, false] {
        let a = h.chat(Harness::body("over tls", stream)).await;
        assert!(a.is_success() && !a.content().is_empty(), "{a:?}");
    }
    assert!(h.snapshot("42").await.nonce >= 2);
}

#[actix_rt::test]
async fn an_untrusted_host_certificate_is_a_clear_error_that_strikes_nobody() {
    let ca = TestCa::new("hosts-untrusted"); // never installed
    let h = behind_tls("tls-untrusted", &ca).await;
    let a = h.chat(Harness::body("untrusted", true)).await;
    let Answer::Failed(e) = a else {
        panic!("expected a failure, got {a:?}")
    };
    assert!(
        e.message.contains("not trusted") && e.message.contains("ca_file"),
        "{e:?}"
    );
    for i in 0..3 {
        let p = h.participant(&h.host(i)).await;
        assert_eq!(p.outcomes.get(&OutcomeClass::HostFault), None, "{p:?}");
    }
}
