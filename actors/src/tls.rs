//! TLS for every outgoing call (hosts, chain REST, public API, the chain poller): rustls 0.23
//! with the `ring` provider, through awc's `rustls-0_23` connector.
//!
//! Trusted roots: the bundled Mozilla roots (`webpki-roots`) plus every certificate of the
//! operator's optional `ca_file` (PEM), installed once at start-up with [`install_ca_file`]. Each
//! awc client is built per thread on first use and takes the trust store current at that moment.
//!
//! A certificate the gateway does not trust is an operator's configuration problem, not a host
//! fault: [`tls_failure`] recognises it (typed: the `rustls::Error` inside awc's connect error)
//! so callers report it as such and strike nobody.

use std::{
    path::Path,
    sync::{Arc, RwLock},
};

use awc::error::{ConnectError, SendRequestError};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{pem::PemObject, CertificateDer};

/// Why the trust store could not be set up (a configuration error at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsSetupError {
    #[error("ca_file {path}: {reason}")]
    CaFile { path: String, reason: String },
}

/// Extra roots installed so far (from `ca_file`), in DER.
static EXTRA_ROOTS: RwLock<Vec<CertificateDer<'static>>> = RwLock::new(Vec::new());

/// Reads every certificate of the PEM file `path` and trusts it from now on, in addition to the
/// bundled roots. Returns how many certificates were added.
pub fn install_ca_file(path: &Path) -> Result<usize, TlsSetupError> {
    let err = |reason: String| TlsSetupError::CaFile {
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(err("holds no PEM certificate".into()));
    }
    let mut probe = RootCertStore::empty();
    for c in &certs {
        probe
            .add(c.clone())
            .map_err(|e| err(format!("unusable certificate: {e}")))?;
    }
    let n = certs.len();
    let mut roots = EXTRA_ROOTS
        .write()
        .map_err(|_| err("trust store poisoned".into()))?;
    for c in certs {
        if !roots.contains(&c) {
            roots.push(c);
        }
    }
    Ok(n)
}

/// The client config of a new connector (`awc::Connector::rustls_0_23`): bundled roots plus the
/// installed ones, HTTP/1.1.
pub fn client_config() -> Arc<ClientConfig> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Ok(extra) = EXTRA_ROOTS.read() {
        for c in extra.iter() {
            // Checked when installed.
            let _ = roots.add(c.clone());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        match ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions() {
            Ok(b) => b,
            // ring supports the safe defaults; fall back to the process default provider.
            Err(_) => ClientConfig::builder(),
        };
    let mut config = builder.with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// When `e` is a TLS failure (the peer's certificate is not trusted, the handshake failed),
/// what went wrong, for the operator.
pub fn tls_failure(e: &SendRequestError) -> Option<String> {
    let SendRequestError::Connect(ConnectError::Io(io)) = e else {
        return None;
    };
    let inner = io.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(match inner {
        rustls::Error::InvalidCertificate(c) => format!(
            "the server's TLS certificate is not trusted ({c:?}); add its CA to `ca_file` \
             (DEVSHARD_CA_FILE) or fix the server's certificate"
        ),
        other => format!("TLS handshake failed: {other}"),
    })
}

/// An awc client over [`client_config`] that follows no redirect: at most `limit` connections
/// (`None`: awc's default) and `timeout` per request (`None`: awc's default; callers may set
/// their own per request). Each caller keeps one per thread.
pub fn awc_client(limit: Option<usize>, timeout: Option<std::time::Duration>) -> awc::Client {
    let mut connector = awc::Connector::new();
    if let Some(limit) = limit {
        connector = connector.limit(limit);
    }
    let mut builder = awc::Client::builder()
        .connector(connector.rustls_0_23(client_config()))
        .disable_redirects();
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    builder.finish()
}
