//! The PostgreSQL database the tests use, one fresh schema per test (dropped after).
//!
//! Where the server comes from, first found wins:
//! 1. `DEVSHARD_TEST_DATABASE_URL`;
//! 2. the local server at 127.0.0.1:5432, database `test`, user `postgres` then `root` (trust
//!    auth; `.ci/run` starts it when it is installed but down);
//! 3. a throwaway cluster made with `initdb`/`pg_ctl` in the temp dir (port 54329, left running
//!    for the next test run; as root it runs as the `postgres` user);
//! 4. none: the test fails and names the package to install. It never skips.

#![allow(dead_code)] // shared by several test binaries; not each uses every helper

use std::{path::PathBuf, process::Command, sync::OnceLock, time::Duration};

use tokio_postgres::{Config, NoTls};

/// Set to use this server instead of looking for one.
pub const ENV_TEST_DATABASE_URL: &str = "DEVSHARD_TEST_DATABASE_URL";

const LOCAL_URLS: [&str; 2] = [
    "postgres://postgres@127.0.0.1:5432/test",
    "postgres://root@127.0.0.1:5432/test",
];
const THROWAWAY_PORT: u16 = 54329;

/// One test's schema on the test server.
pub struct TestDb {
    base: Config,
    schema: String,
}

impl TestDb {
    /// A fresh schema named after the test.
    pub fn new(name: &str) -> TestDb {
        let base = server().clone();
        let schema = format!(
            "t_{}_{}_{:08x}",
            name.chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                .take(24)
                .collect::<String>()
                .to_ascii_lowercase(),
            std::process::id(),
            rand::random::<u32>()
        );
        admin(&base, &format!("CREATE SCHEMA {schema}"))
            .unwrap_or_else(|e| panic!("creating the test schema {schema}: {e}"));
        TestDb { base, schema }
    }

    /// A connection config whose tables live in this test's schema.
    pub fn config(&self) -> Config {
        let mut c = self.base.clone();
        c.options(format!("-c search_path={}", self.schema));
        c
    }

    /// [`TestDb::config`] as a URL (for the command line).
    pub fn url(&self) -> String {
        let host = match self.base.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        let port = self.base.get_ports().first().copied().unwrap_or(5432);
        let user = self.base.get_user().unwrap_or("postgres");
        let db = self.base.get_dbname().unwrap_or("test");
        format!(
            "postgres://{user}@{host}:{port}/{db}?options=-c%20search_path%3D{}",
            self.schema
        )
    }

    /// Runs SQL in this test's schema (from any thread, runtime or not).
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        admin(&self.config(), sql)
    }

    /// Rows of `table` in this test's schema.
    pub fn count(&self, table: &str) -> i64 {
        let (config, sql) = (self.config(), format!("SELECT count(*) FROM {table}"));
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let (client, conn) = config.connect(NoTls).await.unwrap();
                tokio::spawn(conn);
                client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0)
            })
        })
        .join()
        .unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = admin(
            &self.base,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema),
        );
    }
}

/// Runs `sql` on a connection of its own, on a thread with its own runtime.
fn admin(config: &Config, sql: &str) -> Result<(), String> {
    let (config, sql) = (config.clone(), sql.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let connect = config.connect(NoTls);
            let (client, conn) = tokio::time::timeout(Duration::from_secs(5), connect)
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| match e.as_db_error() {
                    Some(db) => db.message().to_string(),
                    None => e.to_string(),
                })
        })
    })
    .join()
    .map_err(|_| "admin thread panicked".to_string())?
}

/// The server, found once per test binary.
fn server() -> &'static Config {
    static SERVER: OnceLock<Config> = OnceLock::new();
    SERVER.get_or_init(|| match find_server() {
        Ok(c) => c,
        Err(tried) => panic!(
            "no PostgreSQL for the tests. Tried: {tried}. Set {ENV_TEST_DATABASE_URL}, start \
             the local server (`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) \
             main start`), or install the `postgresql` package (initdb/pg_ctl)"
        ),
    })
}

fn find_server() -> Result<Config, String> {
    let mut tried = Vec::new();
    if let Ok(url) = std::env::var(ENV_TEST_DATABASE_URL) {
        let config: Config = url.parse().map_err(|e| format!("{url}: {e}"))?;
        return admin(&config, "SELECT 1")
            .map(|()| config)
            .map_err(|e| format!("{ENV_TEST_DATABASE_URL}={url}: {e}"));
    }
    for url in LOCAL_URLS {
        let Ok(config) = url.parse::<Config>() else {
            continue;
        };
        match admin(&config, "SELECT 1") {
            Ok(()) => return Ok(config),
            Err(e) => tried.push(format!("{url}: {e}")),
        }
    }
    match throwaway_cluster() {
        Ok(config) => Ok(config),
        Err(e) => {
            tried.push(format!("initdb/pg_ctl: {e}"));
            Err(tried.join("; "))
        }
    }
}

/// Starts (or reuses) a cluster in the temp dir with `initdb` and `pg_ctl`.
fn throwaway_cluster() -> Result<Config, String> {
    let dir = std::env::temp_dir().join("devshard-test-postgres");
    let url = format!("postgres://postgres@127.0.0.1:{THROWAWAY_PORT}/postgres");
    let config: Config = url.parse().map_err(|e| format!("{e}"))?;
    if admin(&config, "SELECT 1").is_ok() {
        return Ok(config);
    }
    let data = dir.join("data");
    let as_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !data.join("PG_VERSION").exists() {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if as_root {
            run(Command::new("chown").arg("postgres").arg(&dir))?;
        }
        run(pg_command(as_root, "initdb")
            .args(["-U", "postgres", "-A", "trust", "-D"])
            .arg(&data))?;
    }
    run(pg_command(as_root, "pg_ctl")
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("log"))
        .arg("-o")
        .arg(format!(
            "-p {THROWAWAY_PORT} -k {} -c listen_addresses=127.0.0.1",
            dir.display()
        ))
        .args(["-w", "start"]))?;
    admin(&config, "SELECT 1").map(|()| config)
}

fn pg_command(as_root: bool, tool: &str) -> Command {
    let path = find_tool(tool).unwrap_or_else(|| PathBuf::from(tool));
    if as_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

/// `tool` on the PATH or in Debian's versioned directory.
fn find_tool(tool: &str) -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .filter_map(|v| v.ok())
        .map(|v| v.path().join("bin").join(tool))
        .find(|p| p.exists())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A throwaway PostgreSQL cluster of one test, on a free port in its own temp dir, that the test
/// may stop and start (a restart of the database mid-run). Never the machine's server: that one
/// is shared. Removed (stopped at once) when dropped.
pub struct Cluster {
    dir: PathBuf,
    port: u16,
    as_root: bool,
    /// Server options added to `pg_ctl start` (`-c ssl=on …`).
    options: String,
}

/// The TLS server of [`Cluster::start_tls`]: its certificate and key (PEM), and the superuser's
/// password (`pg_hba.conf` then takes `hostssl` connections only, with SCRAM).
pub struct ServerTls<'a> {
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
    pub password: &'a str,
}

impl Cluster {
    /// `initdb` then `pg_ctl start`; fails naming the Debian package when they are missing.
    pub fn start(name: &str) -> Cluster {
        let cluster = Cluster::init(name, None);
        cluster.pg_start();
        cluster
    }

    /// A cluster with `ssl = on` and the certificate of `tls`, whose `pg_hba.conf` refuses
    /// every TCP connection without TLS (`hostssl` only; SCRAM with `tls.password`).
    pub fn start_tls(name: &str, tls: &ServerTls<'_>) -> Cluster {
        let mut cluster = Cluster::init(name, Some(tls.password));
        let data = cluster.data();
        let write = |file: &str, text: &str, mode: u32| {
            let path = data.join(file);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
            if cluster.as_root {
                run(Command::new("chown").arg("postgres").arg(&path)).unwrap();
            }
        };
        write("server.crt", tls.cert_pem, 0o644);
        write("server.key", tls.key_pem, 0o600);
        write(
            "pg_hba.conf",
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            0o600,
        );
        cluster.options =
            " -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key".into();
        cluster.pg_start();
        cluster
    }

    /// `initdb` (the superuser's password from `password`, if any) in a fresh directory.
    fn init(name: &str, password: Option<&str>) -> Cluster {
        assert!(
            find_tool("initdb").is_some(),
            "initdb not found in /usr/lib/postgresql/*/bin: install the `postgresql` package"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let dir =
            std::env::temp_dir().join(format!("devshard-pg-{name}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        if as_root {
            run(Command::new("chown").arg("postgres").arg(&dir)).unwrap();
        }
        let cluster = Cluster {
            dir,
            port,
            as_root,
            options: String::new(),
        };
        let mut initdb = pg_command(as_root, "initdb");
        initdb.args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        if let Some(password) = password {
            let file = cluster.dir.join("pwfile");
            std::fs::write(&file, password).unwrap();
            initdb.arg(format!("--pwfile={}", file.display()));
        }
        run(initdb.arg("-D").arg(cluster.data())).unwrap();
        cluster
    }

    /// The cluster's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Connection config of the cluster's `postgres` database.
    pub fn config(&self) -> Config {
        self.url().parse().unwrap()
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl start -w`.
    pub fn pg_start(&self) {
        run(pg_command(self.as_root, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("log"))
            .arg("-o")
            .arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1{}",
                self.port,
                self.dir.display(),
                self.options
            ))
            .args(["-w", "start"]))
        .unwrap();
    }

    /// `pg_ctl stop -m fast -w`: every connection is terminated.
    pub fn pg_stop(&self) {
        self.stop_mode("fast").unwrap();
    }

    fn stop_mode(&self, mode: &str) -> Result<(), String> {
        run(pg_command(self.as_root, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "stop"]))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop_mode("immediate");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
