//! TLS to PostgreSQL: libpq's `sslmode` semantics over rustls 0.23 (the `ring` provider, as every
//! other outgoing call of the gateway, `devshard_actors::tls`), as tokio-postgres'
//! [`MakeTlsConnect`]. No OpenSSL.
//!
//! | mode | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` | when the server offers it, else plaintext | not checked |
//! | `require` | always (a server without TLS is refused) | not checked; with a root certificate, as `verify-ca` (libpq) |
//! | `verify-ca` | always | chains to a root certificate |
//! | `verify-full` | always | chains to a root certificate and names the host |
//!
//! Root certificates ([`RootCert`]): the PEM file of `sslrootcert` (read again at each connect,
//! so a rotated CA file is picked up at the next reconnect), or `system`: the bundled Mozilla
//! roots (`webpki-roots`), as libpq's `sslrootcert=system`. The handshake's signatures are
//! checked in every mode. ALPN offers `postgresql` (PostgreSQL 17 checks it when it is sent).
//! The session's `tls-server-end-point` channel binding (`binding.rs`) goes to tokio-postgres,
//! which uses SCRAM-SHA-256-PLUS when the server offers it.
//!
//! What the handshake did ([`Handshake`]) is recorded per connection attempt, so a failed connect
//! is classified by type, not by message (`target.rs`).

use std::{
    future::Future,
    io,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use rustls::{
    client::danger::ServerCertVerifier,
    client::WebPkiServerVerifier,
    pki_types::{pem::PemObject, CertificateDer, ServerName},
    CertificateError, ClientConfig, RootCertStore,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::{
    tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream},
    Socket,
};

use super::{
    binding,
    verify::{ChainOnly, Unverified},
};

/// libpq's `sslmode` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// The mode named `s` (libpq's spelling), if any.
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    pub fn requires_tls(self) -> bool {
        !matches!(self, SslMode::Disable | SslMode::Prefer)
    }

    /// tokio-postgres' own mode: it negotiates, this module verifies.
    pub(super) fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the roots that a server's certificate must chain to come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of CA certificates (`sslrootcert=/path`).
    File(PathBuf),
    /// The bundled public roots (`sslrootcert=system`).
    System,
}

impl RootCert {
    /// `system` or a path.
    pub fn parse(s: &str) -> RootCert {
        match s {
            "system" => RootCert::System,
            path => RootCert::File(PathBuf::from(path)),
        }
    }

    /// The roots (a file is read now).
    pub fn load(&self) -> Result<RootCertStore, String> {
        let path = match self {
            RootCert::System => {
                return Ok(RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                })
            }
            RootCert::File(path) => path,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| e.to_string())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("not a PEM certificate file: {e}"))?;
        if certs.is_empty() {
            return Err("holds no PEM certificate".into());
        }
        let mut roots = RootCertStore::empty();
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("unusable certificate: {e}"))?;
        }
        Ok(roots)
    }
}

/// What one connection attempt's TLS handshake did.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Handshake {
    /// Not asked for: the mode is `disable`, the server declined (`prefer`: plaintext; else the
    /// connect failed), or the connection failed before.
    #[default]
    NotStarted,
    /// TLS is up.
    Established,
    /// The handshake failed: the rustls error when there is one (an untrusted certificate, …).
    Failed(HandshakeError),
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq)]
pub enum HandshakeError {
    /// The server's certificate was refused.
    Certificate(CertificateError),
    /// Another TLS error.
    Tls(rustls::Error),
    /// The connection broke during the handshake.
    Io(String),
}

/// Records one attempt's [`Handshake`].
pub type Seen = Arc<Mutex<Handshake>>;

/// The connector of one connection attempt; `seen` says what its handshake did.
pub(super) fn connector(mode: SslMode, root: Option<&RootCert>) -> Result<(PgTls, Seen), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, root) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
            Arc::new(Unverified(provider.clone()))
        }
        (_, None) => return Err(format!("sslmode={mode} needs a root certificate")),
        (_, Some(root)) => {
            let roots = Arc::new(root.load()?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| e.to_string())?;
            match mode {
                SslMode::VerifyFull => webpki,
                _ => Arc::new(ChainOnly(webpki)),
            }
        }
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    let seen = Seen::default();
    let tls = PgTls {
        config: Arc::new(config),
        seen: seen.clone(),
    };
    Ok((tls, seen))
}

/// tokio-postgres' [`MakeTlsConnect`] over rustls (one per connection attempt).
#[derive(Clone)]
pub struct PgTls {
    config: Arc<ClientConfig>,
    seen: Seen,
}

impl MakeTlsConnect<Socket> for PgTls {
    type Stream = PgTlsStream;
    type TlsConnect = PgTlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<PgTlsConnect, Self::Error> {
        Ok(PgTlsConnect {
            name: ServerName::try_from(domain.to_string())?,
            tls: self.clone(),
        })
    }
}

/// One handshake with `name`.
pub struct PgTlsConnect {
    name: ServerName<'static>,
    tls: PgTls,
}

type Handshaking = Pin<Box<dyn Future<Output = io::Result<PgTlsStream>> + Send>>;

impl TlsConnect<Socket> for PgTlsConnect {
    type Stream = PgTlsStream;
    type Error = io::Error;
    type Future = Handshaking;

    fn connect(self, stream: Socket) -> Handshaking {
        Box::pin(async move {
            let PgTlsConnect { name, tls } = self;
            let connected = tokio_rustls::TlsConnector::from(tls.config)
                .connect(name, stream)
                .await;
            let mut seen = tls.seen.lock().unwrap_or_else(|e| e.into_inner());
            match connected {
                Ok(s) => {
                    let end_point = s
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| binding::tls_server_end_point(c));
                    *seen = Handshake::Established;
                    Ok(PgTlsStream {
                        inner: s,
                        end_point,
                    })
                }
                Err(e) => {
                    let typed = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                        Some(rustls::Error::InvalidCertificate(c)) => {
                            HandshakeError::Certificate(c.clone())
                        }
                        Some(other) => HandshakeError::Tls(other.clone()),
                        None => HandshakeError::Io(e.to_string()),
                    };
                    *seen = Handshake::Failed(typed);
                    Err(e)
                }
            }
        })
    }
}

/// A TLS session with the server, and its `tls-server-end-point` binding when known.
pub struct PgTlsStream {
    inner: tokio_rustls::client::TlsStream<Socket>,
    end_point: Option<Vec<u8>>,
}

impl AsyncRead for PgTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PgTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl TlsStream for PgTlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        match &self.end_point {
            Some(hash) => ChannelBinding::tls_server_end_point(hash.clone()),
            None => ChannelBinding::none(),
        }
    }
}
