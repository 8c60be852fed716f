//! A real TLS endpoint for tests: a certificate authority and a server certificate made by the
//! test with rcgen, and a TLS-terminating proxy (tokio-rustls) in front of a plain loopback
//! server (a simulated host or the simulated chain API). Also compiled into `tests/edge.rs`.
#![allow(dead_code)] // shared by several test modules; not each uses every helper

use std::{path::PathBuf, sync::Arc};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// A CA made by the test, with its PEM written to a temp file (for `ca_file`).
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    pub pem_file: PathBuf,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("test CA {name}"));
        let cert = params.self_signed(&key).unwrap();
        let pem_file = std::env::temp_dir().join(format!(
            "devshard-test-ca-{name}-{}.pem",
            std::process::id()
        ));
        std::fs::write(&pem_file, cert.pem()).unwrap();
        TestCa {
            cert,
            key,
            pem_file,
        }
    }

    /// A server config with a certificate for `127.0.0.1` and `localhost` signed by this CA.
    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let chain = vec![
            CertificateDer::from(cert.der().to_vec()),
            CertificateDer::from(self.cert.der().to_vec()),
        ];
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, der)
            .unwrap();
        Arc::new(config)
    }
}

/// Starts a TLS proxy on an ephemeral loopback port in front of `backend` (`host:port`) and
/// returns its `https://127.0.0.1:PORT` URL. It runs until the runtime ends.
pub async fn https_proxy(ca: &TestCa, backend: &str) -> String {
    let target = Backend::default();
    target.set(backend);
    https_proxy_to(ca, target).await
}

/// Where a proxy forwards to; settable after the proxy started.
#[derive(Clone, Default)]
pub struct Backend(Arc<std::sync::Mutex<String>>);

impl Backend {
    pub fn set(&self, authority: &str) {
        *self.0.lock().unwrap() = authority.to_string();
    }
    fn get(&self) -> String {
        self.0.lock().unwrap().clone()
    }
}

/// [`https_proxy`] to a backend that may be set later.
pub async fn https_proxy_to(ca: &TestCa, backend: Backend) -> String {
    let acceptor = TlsAcceptor::from(ca.server_config());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.get());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(&backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    format!("https://127.0.0.1:{port}")
}

/// `host:port` of an `http://host:port[/…]` URL.
pub fn authority(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}
