//! `kill -9` safety: a child process appends diffs and reports each one only after its ack
//! resolved; the parent SIGKILLs it and checks that the reopened file holds every reported diff
//! and that the log is a contiguous prefix of what was issued.

use std::{
    collections::VecDeque,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, Command, Stdio},
};

use devshard_actors::store::Store;
use devshard_gateway::store::SqliteStore;

use crate::support::{diff, TempDir};

/// Carries the database path to the child; the child entry does nothing without it.
pub const CHILD_DB_ENV: &str = "DEVSHARD_STORE_TEST_CHILD_DB";
const ESCROW: &str = "crash";
const PROGRESS_NS: &str = "progress";
/// Appends the child keeps in flight (so that groups of several ops are killed mid-commit too).
const WINDOW: usize = 8;
/// The child stops on its own after this many appends (in case nobody kills it).
const CHILD_MAX_NONCE: u64 = 200_000;
const MARKER: &str = "ACKED ";

/// Body of the child process: appends `diff(1)`, `diff(2)`, … to [`ESCROW`], each followed by a
/// `progress` record holding that nonce, and prints `ACKED <n>` once append `n` is durable.
pub fn child_main(db: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(db).unwrap();
        let mut out = std::io::stdout().lock();
        let mut in_flight = VecDeque::new();
        let mut next = 1u64;
        loop {
            while in_flight.len() < WINDOW && next <= CHILD_MAX_NONCE {
                let append = store.append_diff(ESCROW, &diff(next));
                let progress = store.put(PROGRESS_NS, "last", serde_json::json!(next));
                in_flight.push_back((next, append, progress));
                next += 1;
            }
            let Some((n, append, progress)) = in_flight.pop_front() else {
                break;
            };
            append.await.unwrap();
            if writeln!(out, "{MARKER}{n}")
                .and_then(|()| out.flush())
                .is_err()
            {
                break; // the parent is gone
            }
            progress.await.unwrap();
        }
    });
}

/// Kills the child if the test fails before doing so.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn parse_acked(line: &str) -> Option<u64> {
    // libtest may print its own text on the same line before the first marker.
    let at = line.find(MARKER)?;
    line[at + MARKER.len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs one child, kills it after it reported `kill_after` acked appends, and returns every
/// nonce it reported before dying (in order).
fn run_and_kill(db: &Path, kill_after: usize) -> Vec<u64> {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args(["--exact", "child_writer_entry", "--nocapture", "--ignored"])
        .env(CHILD_DB_ENV, db)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut acked = Vec::new();
    while acked.len() < kill_after {
        let line = lines
            .next()
            .expect("the child exited before acking enough diffs")
            .unwrap();
        acked.extend(parse_acked(&line));
    }
    child.0.kill().unwrap(); // SIGKILL on unix
    child.0.wait().unwrap();
    // Whatever it printed before dying was acked as well.
    for line in lines.map_while(Result::ok) {
        acked.extend(parse_acked(&line));
    }
    acked
}

pub fn kill_minus_9_keeps_every_acked_diff() {
    for kill_after in [1usize, 4, 25, 90, 300] {
        let dir = TempDir::new("kill");
        let db = dir.db();
        let acked = run_and_kill(&db, kill_after);
        let expected: Vec<u64> = (1..=acked.len() as u64).collect();
        assert_eq!(acked, expected, "the child reports acks in nonce order");

        let store = SqliteStore::open(&db).unwrap();
        let log = store.load_diffs(ESCROW).unwrap();
        let nonces: Vec<u64> = log.iter().map(|d| d.nonce).collect();
        let contiguous: Vec<u64> = (1..=nonces.len() as u64).collect();
        assert_eq!(
            nonces, contiguous,
            "log has a gap (killed after {kill_after} acks)"
        );
        assert!(
            log.len() >= acked.len(),
            "acked {} diffs but only {} survived the kill",
            acked.len(),
            log.len()
        );
        for d in &log {
            assert_eq!(d, &diff(d.nonce), "diff {} changed on disk", d.nonce);
        }
        // Appends and puts were issued alternately; a crash keeps a prefix of that sequence.
        let progress = store
            .get(PROGRESS_NS, "last")
            .unwrap()
            .and_then(|v| v.as_u64());
        let progress = progress.unwrap_or(0);
        let last = log.len() as u64;
        assert!(
            progress == last || progress + 1 == last,
            "progress record {progress} is not a prefix neighbour of the last diff {last}"
        );
        println!(
            "killed after {kill_after} acks: {} reported, {} durable",
            acked.len(),
            log.len()
        );
        // The reopened store continues the log where it stopped.
        let next = futures::executor::block_on(store.append_diff(ESCROW, &diff(last + 1)));
        next.unwrap();
        let stale = futures::executor::block_on(store.append_diff(ESCROW, &diff(last)));
        assert!(stale.is_err());
        store.close().unwrap();
        drop(store);
        drop(dir);
    }
}
