//! ClickHouse servers of a test's own (`scripts/clickhouse`) and stores made to stall:
//! what the outage, crash and full-queue tests need beyond a `TestServer`.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::{on_clickhouse, TestServer};

/// A ClickHouse server of this test's own (`scripts/clickhouse`), stopped on drop.
pub(crate) struct ScratchClickHouse {
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
}

fn clickhouse_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/clickhouse")
}

fn run_script(dir: &tempfile::TempDir, what: &str, name: Option<&str>) -> String {
    let out = Command::new("bash")
        .arg(clickhouse_script())
        .arg(what)
        .arg(dir.path())
        .args(name)
        .output()
        .expect("run scripts/clickhouse");
    assert!(
        out.status.success(),
        "scripts/clickhouse {what} {name:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl ScratchClickHouse {
    pub(crate) fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = Self::run(&dir, "start");
        Self { dir, url }
    }

    fn run(dir: &tempfile::TempDir, what: &str) -> String {
        run_script(dir, what, None)
    }

    /// The store URL of `database` on this server.
    pub(crate) fn store(&self, database: &str) -> String {
        format!(
            "clickhouse://{}/{database}",
            self.url.trim_start_matches("http://")
        )
    }

    pub(crate) fn stop(&self) {
        Self::run(&self.dir, "stop");
    }

    /// Freezes the server (SIGSTOP): connections are accepted by the kernel and never
    /// answered — a ClickHouse that stalls, as a SQLite writer blocked by a lock does.
    pub(crate) fn freeze(&self) {
        self.signal("-STOP");
    }

    pub(crate) fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = std::fs::read_to_string(self.dir.path().join("ch1.pid")).unwrap();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.trim())
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts it again, on the same ports and data.
    pub(crate) fn restart(&self) {
        let url = Self::run(&self.dir, "start");
        assert_eq!(url, self.url);
    }
}

/// Stops every server under `dir` (on drop: failures are not reported).
fn stop_all(dir: &tempfile::TempDir) {
    let _ = Command::new("bash")
        .arg(clickhouse_script())
        .arg("stop")
        .arg(dir.path())
        .output();
}

impl Drop for ScratchClickHouse {
    fn drop(&mut self) {
        stop_all(&self.dir);
    }
}

/// ClickHouse servers of this test's own with ZooKeeper (`scripts/clickhouse`): the
/// nodes of its clusters (`threadline_two_shards`: ch1, ch2; `threadline_two_replicas`:
/// ch3, ch4) that the test starts. All stopped on drop.
pub(crate) struct ScratchCluster {
    dir: tempfile::TempDir,
}

impl ScratchCluster {
    pub(crate) fn start(nodes: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        run_script(&dir, "start", Some("zk"));
        for node in nodes {
            run_script(&dir, "start", Some(node));
        }
        Self { dir }
    }

    /// `http://127.0.0.1:PORT` of a node.
    pub(crate) fn url(&self, node: &str) -> String {
        run_script(&self.dir, "url", Some(node))
    }

    /// The store URL of `database` through `node`.
    pub(crate) fn store(&self, node: &str, database: &str) -> String {
        format!(
            "clickhouse://{}/{database}",
            self.url(node).trim_start_matches("http://")
        )
    }

    pub(crate) fn stop(&self, node: &str) {
        run_script(&self.dir, "stop", Some(node));
    }

    /// Starts a stopped node again, on its ports and data.
    pub(crate) fn restart(&self, node: &str) {
        run_script(&self.dir, "start", Some(node));
    }
}

impl Drop for ScratchCluster {
    fn drop(&mut self) {
        stop_all(&self.dir);
    }
}

/// A server whose store stops taking writes until `release`: the embedded store with
/// SQLite's write lock held from outside, or (on a ClickHouse run) a ClickHouse server
/// of the test's own, frozen.
pub(crate) struct StalledStore {
    pub(crate) server: TestServer,
    hold: Option<Hold>,
    _clickhouse: Option<ScratchClickHouse>,
}

enum Hold {
    Sqlite(rusqlite::Connection),
    ClickHouse,
}

impl StalledStore {
    /// A server with `toml_text`, its store stalled.
    pub(crate) fn start(toml_text: &str) -> Self {
        if on_clickhouse() {
            let ch = ScratchClickHouse::start();
            let server = TestServer::start_on_store(&ch.store("tl_stalled"), Some(toml_text));
            ch.freeze();
            Self {
                server,
                hold: Some(Hold::ClickHouse),
                _clickhouse: Some(ch),
            }
        } else {
            let server = TestServer::start_with_config(Some(toml_text));
            let blocker = rusqlite::Connection::open(server.db_path()).unwrap();
            blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
            Self {
                server,
                hold: Some(Hold::Sqlite(blocker)),
                _clickhouse: None,
            }
        }
    }

    /// The store takes writes again.
    pub(crate) fn release(&mut self) {
        match self.hold.take() {
            Some(Hold::Sqlite(blocker)) => blocker.execute_batch("COMMIT").unwrap(),
            Some(Hold::ClickHouse) => {
                if let Some(ch) = &self._clickhouse {
                    ch.thaw();
                }
            }
            None => {}
        }
    }
}

impl Drop for StalledStore {
    fn drop(&mut self) {
        self.release();
    }
}
