//! TLS to PostgreSQL against a real server: a throwaway cluster with `ssl = on`, a certificate
//! signed by a CA the test makes with rcgen (for `127.0.0.1` and `localhost`), and a
//! `pg_hba.conf` that takes TCP connections with TLS only (`hostssl`, SCRAM). Every connection
//! site opens through `target::connect`; the store's three connections, the ledger's two and
//! `migrate`'s are exercised here.

use std::time::Duration;

use devshard_actors::store::Store;
use devshard_gateway::store::{
    ledger::LedgerStore,
    migrate::migrate_to,
    postgres::{
        target::{self, ConnectFailure},
        PgStore, PgTarget, ReplicaConfig, SslMode, TlsKeys,
    },
    SqliteStore,
};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

use crate::{
    pgdb::{Cluster, ServerTls},
    support::diff,
};

const PASSWORD: &str = "s3cret-pw";
const WITHIN: Duration = Duration::from_secs(10);

/// A CA and its PEM file.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    file: std::path::PathBuf,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("devshard test CA {name}"),
    );
    let cert = params.self_signed(&key).unwrap();
    let file =
        std::env::temp_dir().join(format!("devshard-pg-ca-{name}-{}.pem", std::process::id()));
    std::fs::write(&file, cert.pem()).unwrap();
    Ca { cert, key, file }
}

/// A server certificate for `127.0.0.1` and `localhost` signed by `ca`: (cert, key) PEM.
fn server_cert(ca: &Ca) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn replica() -> ReplicaConfig {
    ReplicaConfig {
        id: "r1".into(),
        lease_ttl: Duration::from_secs(10),
        advertise_url: String::new(),
    }
}

fn target(url: &str) -> PgTarget {
    PgTarget::parse(url, TlsKeys::default()).unwrap()
}

/// The error of a connect that must fail.
async fn refused(url: &str) -> target::PgConnectError {
    match target::connect(&target(url), WITHIN).await {
        Ok(_) => panic!("{url}: connected"),
        Err(e) => e,
    }
}

pub async fn tls_modes_against_a_server_that_takes_tls_connections_only() {
    let (right, wrong) = (ca("right"), ca("wrong"));
    let (cert_pem, key_pem) = server_cert(&right);
    let cluster = Cluster::start_tls(
        "tls",
        &ServerTls {
            cert_pem: &cert_pem,
            key_pem: &key_pem,
            password: PASSWORD,
        },
    );
    let base = format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres",
        cluster.port()
    );
    let host = format!("127.0.0.1:{}", cluster.port());
    let log = slog::Logger::root(slog::Discard, slog::o!());

    // verify-full with the right CA, the channel binding required (SCRAM-SHA-256-PLUS: a wrong
    // tls-server-end-point hash fails the authentication): the store opens, an append commits, a
    // lease is claimed, every connection is encrypted.
    let full = format!(
        "{base}?sslmode=verify-full&sslrootcert={}&channel_binding=require",
        right.file.display()
    );
    let store = PgStore::open_target(target(&full), replica(), log.clone()).unwrap();
    store.claim_escrow("e").unwrap();
    store.append_diff("e", &diff(1)).await.unwrap();
    assert_eq!(store.load_diffs("e").unwrap(), vec![diff(1)]);
    assert_eq!(store.held_leases(), vec![("e".to_string(), 1)]);
    let links = store.connections();
    assert!(links.iter().all(|c| c.up && c.tls), "{links:?}");
    store.close().unwrap();
    drop(store);
    // The ledger's connections and `migrate`'s go the same way.
    let ledger = LedgerStore::open_postgres(&target(&full), log.clone()).unwrap();
    drop(ledger);
    let sqlite =
        std::env::temp_dir().join(format!("devshard-tls-migrate-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&sqlite);
    drop(SqliteStore::open(&sqlite).unwrap());
    let (path, to) = (sqlite.clone(), target(&full));
    let not_empty = std::thread::spawn(move || migrate_to(&path, &to))
        .join()
        .unwrap()
        .unwrap_err();
    assert!(
        not_empty.to_string().contains("not empty"),
        "connected over TLS and found the store's rows: {not_empty}"
    );
    let _ = std::fs::remove_file(&sqlite);

    // A CA that did not sign the server's certificate: refused, typed, naming host and mode.
    let bad = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        wrong.file.display()
    );
    let e = refused(&bad).await;
    assert_eq!(
        (e.host.as_str(), e.mode),
        (host.as_str(), SslMode::VerifyFull)
    );
    assert!(
        matches!(
            e.failure,
            ConnectFailure::Untrusted(rustls::CertificateError::UnknownIssuer)
        ),
        "{e}"
    );
    let opened = PgStore::open_target(target(&bad), replica(), log.clone()).unwrap_err();
    let text = opened.to_string();
    eprintln!("wrong CA: {text}");
    assert!(
        text.contains(&host)
            && text.contains("sslmode=verify-full")
            && text.contains("not trusted"),
        "{text}"
    );
    assert!(
        !text.contains(PASSWORD),
        "the password is never shown: {text}"
    );
    // verify-ca checks the chain as well.
    let ca_only = format!(
        "{base}?sslmode=verify-ca&sslrootcert={}",
        wrong.file.display()
    );
    let e = refused(&ca_only).await;
    assert!(matches!(e.failure, ConnectFailure::Untrusted(_)), "{e}");

    // Without TLS the server refuses the connection (hostssl only): typed and clear.
    let e = refused(&format!("{base}?sslmode=disable")).await;
    eprintln!("plaintext: {e}");
    assert_eq!(e.mode, SslMode::Disable);
    assert!(
        matches!(e.failure, ConnectFailure::PlaintextRefused(_)),
        "{e}"
    );
    assert!(
        e.to_string().contains("sslmode=require"),
        "says what to do: {e}"
    );
    assert!(!e.to_string().contains(PASSWORD), "{e}");

    // require without a CA: encrypted, the certificate not checked.
    let (client, connection, negotiated) =
        target::connect(&target(&format!("{base}?sslmode=require")), WITHIN)
            .await
            .unwrap();
    assert!(negotiated.tls && negotiated.mode == SslMode::Require);
    tokio::spawn(connection);
    let on: String = client
        .query_one(
            "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(on, "true", "the server sees an encrypted session");
    // And prefer, the default, takes TLS when the server offers it.
    let (_, _, negotiated) = target::connect(&target(&base), WITHIN).await.unwrap();
    assert_eq!((negotiated.tls, negotiated.mode), (true, SslMode::Prefer));
}

pub async fn require_refuses_a_server_without_tls() {
    let cluster = Cluster::start("notls");
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    let e = refused(&format!("{url}?sslmode=require")).await;
    eprintln!("no TLS: {e}");
    assert_eq!(e.failure, ConnectFailure::ServerWithoutTls, "{e}");
    assert!(
        e.to_string()
            .contains(&format!("127.0.0.1:{}", cluster.port())),
        "{e}"
    );
    // prefer falls back to plaintext there.
    let (_, _, negotiated) = target::connect(&target(&url), WITHIN).await.unwrap();
    assert_eq!((negotiated.tls, negotiated.mode), (false, SslMode::Prefer));
}
