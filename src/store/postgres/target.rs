//! Where the PostgreSQL store connects and how: a `postgres://` URL with libpq's TLS parameters
//! (`tls.rs`), and the one function every connection of the gateway opens with ([`connect`]:
//! the store's, the ledger's, the shared events listener's and `migrate`'s).
//!
//! `sslmode` and `sslrootcert` are taken out of the URL's query here (tokio-postgres parses
//! `sslmode` only as `disable`/`prefer`/`require` and refuses `sslrootcert`), or come from
//! `[store] sslmode` / `sslrootcert` (`DEVSHARD_DATABASE_SSLMODE`, `DEVSHARD_DATABASE_SSLROOTCERT`)
//! when the URL does not name them; both naming one differently is refused. The mode when
//! nothing is said: `prefer` (libpq's), or `verify-full` when a root certificate is given
//! (giving a CA means it is to be checked; libpq would not check it under `prefer`). As libpq:
//! `require` with a root certificate checks the chain (`verify-ca`); `sslrootcert=system` goes
//! with `verify-full` only; `verify-ca` and `verify-full` need a root certificate.
//!
//! A failed connect is a [`PgConnectError`]: the URL's host and port and the mode (never the
//! password or the URL) and a typed [`ConnectFailure`], from the handshake's own record and
//! the server's SQLSTATE, never from an error's text.

use std::time::Duration;

use tokio_postgres::{config::Host, Client, Config, Connection, Socket};

use super::tls::{self, Handshake, HandshakeError, PgTlsStream, RootCert, SslMode};

/// A PostgreSQL database to connect to, with its TLS settings.
#[derive(Clone)]
pub struct PgTarget {
    config: Config,
    mode: SslMode,
    root: Option<RootCert>,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("host", &self.host())
            .field("sslmode", &self.mode)
            .field("sslrootcert", &self.root)
            .finish()
    }
}

/// `[store] sslmode` and `sslrootcert` (empty: not set).
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsKeys<'a> {
    pub sslmode: &'a str,
    pub sslrootcert: &'a str,
}

/// Why a URL or its TLS settings are refused (at start, before any connection).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(String),
    #[error("sslmode {0:?} is none of disable, prefer, require, verify-ca, verify-full")]
    Mode(String),
    #[error("{name} is {url:?} in the URL but {key:?} in [store]: name it once")]
    Conflict {
        name: &'static str,
        url: String,
        key: String,
    },
    #[error(
        "sslmode={0} checks the server's certificate: set sslrootcert (a CA file, or `system`)"
    )]
    RootNeeded(SslMode),
    #[error("sslrootcert=system goes with sslmode=verify-full only (not {0}), as libpq")]
    SystemNeedsVerifyFull(SslMode),
    #[error("sslrootcert {path}: {reason}")]
    RootCert { path: String, reason: String },
}

impl TargetError {
    /// The configuration key the error is about.
    pub fn key(&self) -> &'static str {
        match self {
            TargetError::Url(_) => "store.url",
            TargetError::Mode(_)
            | TargetError::Conflict {
                name: "sslmode", ..
            } => "store.sslmode",
            _ => "store.sslrootcert",
        }
    }
}

impl PgTarget {
    /// `url` with the TLS settings of its query and of `keys` (see the module docs).
    pub fn parse(url: &str, keys: TlsKeys<'_>) -> Result<PgTarget, TargetError> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let (mut mode, mut root, mut kept) = (None, None, Vec::new());
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match decode(k).as_str() {
                "sslmode" => mode = Some(decode(v)),
                "sslrootcert" => root = Some(decode(v)),
                _ => kept.push(pair),
            }
        }
        let mode = pick("sslmode", mode, keys.sslmode)?;
        let root = pick("sslrootcert", root, keys.sslrootcert)?;
        let url = match kept.is_empty() {
            true => base.to_string(),
            false => format!("{base}?{}", kept.join("&")),
        };
        let config: Config = url.parse().map_err(|e| TargetError::Url(format!("{e}")))?;
        let mode = match mode {
            Some(m) => Some(SslMode::parse(&m).ok_or(TargetError::Mode(m))?),
            None => None,
        };
        PgTarget::with(config, mode, root.map(|r| RootCert::parse(&r)))
    }

    /// A parsed config: its own `sslmode` (disable, prefer or require), no root certificate.
    pub fn from_config(config: Config) -> PgTarget {
        let mode = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        };
        PgTarget {
            config,
            mode,
            root: None,
        }
    }

    /// `config` with `mode` (`None`: the default) and `root`, checked as libpq would.
    pub fn with(
        mut config: Config,
        mode: Option<SslMode>,
        root: Option<RootCert>,
    ) -> Result<PgTarget, TargetError> {
        let mode = match (mode, &root) {
            (None, None) => SslMode::Prefer,
            (None, Some(_)) => SslMode::VerifyFull,
            (Some(SslMode::Require), Some(RootCert::File(_))) => SslMode::VerifyCa,
            (Some(m), _) => m,
        };
        match (&root, mode) {
            (Some(RootCert::System), m) if m != SslMode::VerifyFull => {
                return Err(TargetError::SystemNeedsVerifyFull(m))
            }
            (None, SslMode::VerifyCa | SslMode::VerifyFull) => {
                return Err(TargetError::RootNeeded(mode))
            }
            (Some(r @ RootCert::File(path)), _) => {
                r.load().map_err(|reason| TargetError::RootCert {
                    path: path.display().to_string(),
                    reason,
                })?;
            }
            _ => {}
        }
        config.ssl_mode(mode.negotiation());
        Ok(PgTarget { config, mode, root })
    }

    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// The settings without the TLS ones (a schema's `options`, …).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same database and TLS settings with other connection settings (tests: a schema).
    pub fn map_config(mut self, f: impl FnOnce(&mut Config)) -> PgTarget {
        f(&mut self.config);
        self
    }

    /// `host:port` of the URL (every host, comma-separated), for messages and logs.
    pub fn host(&self) -> String {
        let ports = self.config.get_ports();
        let hosts: Vec<String> = (self.config.get_hosts().iter().enumerate())
            .map(|(i, h)| {
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                match h {
                    Host::Tcp(name) => format!("{name}:{port}"),
                    Host::Unix(path) => format!("{}:{port}", path.display()),
                }
            })
            .collect();
        match hosts.is_empty() {
            true => "localhost:5432".into(),
            false => hosts.join(","),
        }
    }

    fn failed(&self, failure: ConnectFailure) -> PgConnectError {
        PgConnectError {
            host: self.host(),
            mode: self.mode,
            failure,
        }
    }
}

/// `value` in a URL's query, percent-decoded (`+` is a space in a query).
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL's value, else the key's; both set and different is refused.
fn pick(name: &'static str, url: Option<String>, key: &str) -> Result<Option<String>, TargetError> {
    let key = key.trim();
    match url {
        Some(u) if !key.is_empty() && u != key => Err(TargetError::Conflict {
            name,
            url: u,
            key: key.to_string(),
        }),
        Some(u) => Ok(Some(u)),
        None if key.is_empty() => Ok(None),
        None => Ok(Some(key.to_string())),
    }
}

/// A connection that could not be opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("PostgreSQL at {host} (sslmode={mode}): {failure}")]
pub struct PgConnectError {
    pub host: String,
    pub mode: SslMode,
    pub failure: ConnectFailure,
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnectFailure {
    #[error("the server does not offer TLS, which this sslmode requires")]
    ServerWithoutTls,
    #[error("the server's certificate is not trusted ({0:?}): check sslrootcert, or the server's certificate and host name")]
    Untrusted(rustls::CertificateError),
    #[error("the TLS handshake failed: {0}")]
    Handshake(String),
    #[error("the server refused this connection, made without TLS: {0} (a server that takes TLS connections only, pg_hba `hostssl`, needs sslmode=require or stricter)")]
    PlaintextRefused(String),
    #[error("sslrootcert: {0}")]
    RootCert(String),
    #[error("no connection within {0} ms")]
    TimedOut(u128),
    #[error("{0}")]
    Failed(String),
}

/// What an opened connection negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Whether the session is encrypted.
    pub tls: bool,
    pub mode: SslMode,
}

/// An open connection: its client, its driver (to spawn or poll) and what it negotiated.
pub type Opened = (Client, Connection<Socket, PgTlsStream>, Negotiated);

/// Opens one connection to `target` within `within`.
pub async fn connect(target: &PgTarget, within: Duration) -> Result<Opened, PgConnectError> {
    let (tls, seen) = tls::connector(target.mode, target.root.as_ref())
        .map_err(|e| target.failed(ConnectFailure::RootCert(e)))?;
    let connected = tokio::time::timeout(within, target.config.connect(tls))
        .await
        .map_err(|_| target.failed(ConnectFailure::TimedOut(within.as_millis())))?;
    let handshake = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match connected {
        Ok((client, connection)) => {
            let tls = handshake == Handshake::Established;
            Ok((
                client,
                connection,
                Negotiated {
                    tls,
                    mode: target.mode,
                },
            ))
        }
        Err(e) => Err(target.failed(classify(&e, &handshake, target.mode))),
    }
}

/// The typed cause of a failed connect (pure, from what the handshake recorded, the server's
/// SQLSTATE and the error's i/o source).
pub fn classify(e: &tokio_postgres::Error, handshake: &Handshake, mode: SslMode) -> ConnectFailure {
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    let sqlstate = e.as_db_error().map(|db| db.code().code());
    match handshake {
        Handshake::Failed(HandshakeError::Certificate(c)) => ConnectFailure::Untrusted(c.clone()),
        Handshake::Failed(HandshakeError::Tls(t)) => ConnectFailure::Handshake(t.to_string()),
        Handshake::Failed(HandshakeError::Io(m)) => ConnectFailure::Handshake(m.clone()),
        // Never started, no i/o error and no server error: the server answered the SSLRequest
        // with "no" (tokio-postgres' refusal for this mode).
        Handshake::NotStarted if mode.requires_tls() && !io && sqlstate.is_none() => {
            ConnectFailure::ServerWithoutTls
        }
        // 28000: no pg_hba.conf entry takes this (unencrypted) connection.
        Handshake::NotStarted if sqlstate == Some("28000") => {
            ConnectFailure::PlaintextRefused(db_message(e))
        }
        _ => ConnectFailure::Failed(db_message(e)),
    }
}

/// The server's message when it sent one, else the error.
fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_come_out_of_the_url_and_follow_libpq() {
        let t = PgTarget::parse("postgres://gw:pw@db:6432/gw", TlsKeys::default()).unwrap();
        assert_eq!((t.mode(), t.host()), (SslMode::Prefer, "db:6432".into()));
        let url = "postgres://gw@db/gw?options=-c%20search_path%3Ds&sslmode=verify-full&sslrootcert=system";
        let t = PgTarget::parse(url, TlsKeys::default()).unwrap();
        assert_eq!(t.mode(), SslMode::VerifyFull);
        assert_eq!(t.root, Some(RootCert::System));
        assert_eq!(t.config().get_options(), Some("-c search_path=s"));
        let parse = |url: &str, keys| PgTarget::parse(url, keys).map(|t| t.mode());
        assert_eq!(
            parse("postgres://db/gw?sslmode=disable", TlsKeys::default()),
            Ok(SslMode::Disable)
        );
        let system = TlsKeys {
            sslmode: "",
            sslrootcert: "system",
        };
        assert_eq!(parse("postgres://db/gw", system), Ok(SslMode::VerifyFull));
        assert_eq!(
            parse("postgres://db/gw?sslmode=require", system),
            Err(TargetError::SystemNeedsVerifyFull(SslMode::Require))
        );
        assert_eq!(
            parse("postgres://db/gw?sslmode=verify-ca", TlsKeys::default()),
            Err(TargetError::RootNeeded(SslMode::VerifyCa))
        );
        assert!(matches!(
            parse("postgres://db/gw?sslmode=allow", TlsKeys::default()),
            Err(TargetError::Mode(_))
        ));
        let keyed = TlsKeys {
            sslmode: "disable",
            sslrootcert: "",
        };
        assert!(matches!(
            parse("postgres://db/gw?sslmode=require", keyed),
            Err(TargetError::Conflict {
                name: "sslmode",
                ..
            })
        ));
        assert_eq!(
            parse(
                "postgres://db/gw?sslmode=require",
                TlsKeys {
                    sslmode: "require",
                    ..keyed
                }
            ),
            Ok(SslMode::Require)
        );
        assert!(matches!(
            parse(
                "postgres://db/gw?sslrootcert=/nonexistent/ca.crt",
                TlsKeys::default()
            ),
            Err(TargetError::RootCert { .. })
        ));
        let debug = format!(
            "{:?}",
            PgTarget::parse("postgres://gw:s3cret@db/gw", TlsKeys::default()).unwrap()
        );
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn query_values_are_percent_decoded() {
        assert_eq!(decode("%2Fetc%2Fca.crt"), "/etc/ca.crt");
        assert_eq!(decode("a+b%zz"), "a b%zz");
    }
}
