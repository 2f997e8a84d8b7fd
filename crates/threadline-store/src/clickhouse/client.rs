//! The connection to ClickHouse: the `clickhouse` crate's HTTP client (RowBinary), run on
//! a small runtime of the backend's own so that the store's blocking operations can
//! wait for it from any thread — a handler's blocking task or a test's main thread.
//!
//! Credentials come from the config (file or environment), never from a URL on the
//! command line; `ClickHouseConfig`'s `Debug` shows no password and no error message
//! here carries one.

use std::future::Future;

use crate::StoreError;

/// Where the ClickHouse store lives and who Threadline is there.
#[derive(Clone, PartialEq, Eq)]
pub struct ClickHouseConfig {
    /// `http://HOST:PORT` of the server's HTTP interface.
    pub url: String,
    pub database: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Settings sent with every request (`max_execution_time`, `log_queries`, …).
    pub settings: Vec<(String, String)>,
    /// The cluster (of the server's `remote_servers`) to store through: every table is
    /// a Replicated table on each node behind a `Distributed` one (`schema`). `None`:
    /// the one server is the store.
    pub cluster: Option<String>,
    /// Wall time a search's first page may take before it answers with the traces of
    /// the span searched so far (`TracePage::searched_from_unix_nano`): servers without
    /// skip indexes scan every window a search that matches little reads. `None`: a
    /// first page reads as far as it must.
    pub first_page_budget: Option<std::time::Duration>,
}

impl std::fmt::Debug for ClickHouseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseConfig")
            .field("url", &self.url)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("settings", &self.settings)
            .field("cluster", &self.cluster)
            .field("first_page_budget", &self.first_page_budget)
            .finish()
    }
}

impl ClickHouseConfig {
    /// `first_page_budget` unless the configuration says otherwise.
    pub const DEFAULT_FIRST_PAGE_BUDGET: std::time::Duration =
        std::time::Duration::from_millis(800);

    /// Parses `clickhouse://HOST:PORT/DATABASE` (the HTTP port). A user or password in
    /// the URL is refused: it would show in process lists and shell history.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let bad = |why: &str| {
            StoreError::invalid_query(format!(
                "store URL {:?} is invalid: {why} (expected clickhouse://HOST:PORT/DATABASE)",
                strip_credentials(url)
            ))
        };
        let rest = url
            .strip_prefix("clickhouse://")
            .ok_or_else(|| bad("it does not start with clickhouse://"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.contains('@') {
            return Err(bad(
                "credentials go in the config file or THREADLINE_CLICKHOUSE_USER / \
                 THREADLINE_CLICKHOUSE_PASSWORD, not in the URL",
            ));
        }
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        let database = path.trim_end_matches('/');
        let database = if database.is_empty() {
            "threadline"
        } else {
            database
        };
        if !is_identifier(database) {
            return Err(bad("a database name is letters, digits and _"));
        }
        let authority = if authority.contains(':') {
            authority.to_owned()
        } else {
            format!("{authority}:8123")
        };
        Ok(Self {
            url: format!("http://{authority}"),
            database: database.to_owned(),
            user: None,
            password: None,
            settings: Vec::new(),
            cluster: None,
            first_page_budget: Some(Self::DEFAULT_FIRST_PAGE_BUDGET),
        })
    }
}

impl ClickHouseConfig {
    /// The environment variable naming the ClickHouse server the test suites use
    /// (`scripts/test` starts one and sets it).
    pub const TEST_SERVER_ENV: &'static str = "THREADLINE_TEST_CLICKHOUSE";

    /// The environment variables naming a node of the test clusters that
    /// `scripts/clickhouse` defines (`scripts/test` starts them, with ZooKeeper): ch1 of
    /// `threadline_two_shards`, ch3 of `threadline_two_replicas`.
    pub const TEST_SHARDS_ENV: &'static str = "THREADLINE_TEST_CLICKHOUSE_SHARDS";
    pub const TEST_REPLICAS_ENV: &'static str = "THREADLINE_TEST_CLICKHOUSE_REPLICAS";

    /// A database of its own (named `prefix`, the process and a counter) on the test
    /// server; panics, saying how to start one, when none is named.
    pub fn for_tests(prefix: &str) -> Self {
        Self::for_tests_on(prefix, Self::TEST_SERVER_ENV, None)
    }

    /// `for_tests` on a test cluster: two shards (`replicas` false) or two replicas of
    /// one shard.
    pub fn for_tests_on_cluster(prefix: &str, replicas: bool) -> Self {
        if replicas {
            Self::for_tests_on(
                prefix,
                Self::TEST_REPLICAS_ENV,
                Some("threadline_two_replicas"),
            )
        } else {
            Self::for_tests_on(prefix, Self::TEST_SHARDS_ENV, Some("threadline_two_shards"))
        }
    }

    fn for_tests_on(prefix: &str, env: &str, cluster: Option<&str>) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let url = std::env::var(env).unwrap_or_else(|_| {
            panic!(
                "{env} names no ClickHouse server: run the tests with scripts/test, or start \
                 one with `scripts/clickhouse start DIR [NAME]` (and `zk` first for a cluster) \
                 and export its URL"
            )
        });
        Self {
            url,
            database: format!(
                "{prefix}_{}_{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ),
            user: None,
            password: None,
            settings: Vec::new(),
            cluster: cluster.map(str::to_owned),
            // Tests of whole answers on a loaded test machine: no first page is cut
            // (the tests of the budget set one).
            first_page_budget: None,
        }
    }

    /// `for_tests` as a store URL (`serve --store`).
    pub fn test_store_url(prefix: &str) -> String {
        let c = Self::for_tests(prefix);
        format!(
            "clickhouse://{}/{}",
            c.url.trim_start_matches("http://"),
            c.database
        )
    }
}

/// Letters, digits and `_`, not starting with a digit: a name that goes into SQL as is.
pub(crate) fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// `url` with anything before an `@` in its authority replaced, for messages.
fn strip_credentials(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}<credentials>{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The server's version, which decides the DDL (`schema`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ServerVersion {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

impl ServerVersion {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self { major, minor })
    }

    pub(crate) fn at_least(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

/// The client and the runtime its requests run on.
pub(crate) struct Connection {
    /// The client of the store's database.
    pub(crate) client: clickhouse::Client,
    /// The client of the server, no database chosen (creating the database).
    pub(crate) server: clickhouse::Client,
    runtime: Option<tokio::runtime::Runtime>,
    pub(crate) version: ServerVersion,
    /// The cluster the tables are spread over (`ClickHouseConfig::cluster`).
    pub(crate) cluster: Option<String>,
    pub(crate) database: String,
    /// `ClickHouseConfig::first_page_budget`.
    pub(crate) first_page_budget: Option<std::time::Duration>,
}

impl Connection {
    pub(crate) fn open(config: &ClickHouseConfig) -> Result<Self, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("clickhouse")
            .enable_all()
            .build()
            .map_err(|e| StoreError::unavailable(format!("cannot start a runtime: {e}")))?;
        // Debian's 18.16 has no RowBinaryWithNamesAndTypes: plain RowBinary, no validation.
        let mut client = clickhouse::Client::default()
            .with_url(&config.url)
            .with_validation(false);
        if let Some(user) = &config.user {
            client = client.with_user(user);
        }
        if let Some(password) = &config.password {
            client = client.with_password(password);
        }
        if let Some(cluster) = &config.cluster {
            if !is_identifier(cluster) {
                return Err(StoreError::invalid_query(format!(
                    "cluster name {cluster:?}: letters, digits and _"
                )));
            }
            client = client
                // An insert is acknowledged once each shard has it, not when it is
                // queued on the node Threadline talks to.
                .with_setting("insert_distributed_sync", "1")
                // A subquery over a table with the same sharding (spans by trace) runs
                // on each shard's own rows.
                .with_setting("distributed_product_mode", "local")
                // Every read and write goes to the first live replica of each shard in
                // the cluster's order: a replica reads what was just written there.
                .with_setting("load_balancing", "in_order")
                // ON CLUSTER statements (schema, erasure) wait this long for each node.
                .with_setting("distributed_ddl_task_timeout", "30");
        }
        for (name, value) in &config.settings {
            client = client.with_setting(name, value);
        }
        let mut conn = Self {
            server: client.clone(),
            client,
            runtime: Some(runtime),
            version: ServerVersion { major: 0, minor: 0 },
            cluster: config.cluster.clone(),
            database: config.database.clone(),
            first_page_budget: config.first_page_budget,
        };
        let version: String = conn.run({
            let client = conn.client.clone();
            async move { client.query("SELECT version()").fetch_one::<String>().await }
        })?;
        conn.version = ServerVersion::parse(&version).ok_or_else(|| {
            StoreError::unavailable(format!(
                "ClickHouse answered an unknown version {version:?}"
            ))
        })?;
        if !conn.version.at_least(19, 3) {
            // LowCardinality is experimental before 19.3.
            conn.client = conn
                .client
                .clone()
                .with_setting("allow_experimental_low_cardinality_type", "1");
        }
        conn.server = conn.client.clone();
        conn.client = conn.client.clone().with_database(&config.database);
        Ok(conn)
    }

    /// The handle that spawns onto the backend's runtime.
    pub(crate) fn handle(&self) -> tokio::runtime::Handle {
        match &self.runtime {
            Some(rt) => rt.handle().clone(),
            None => unreachable_runtime(),
        }
    }

    /// Runs a request on the backend's runtime and waits for it (any thread, inside an
    /// async runtime or not: the wait is a plain channel).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        request: impl Future<Output = clickhouse::error::Result<T>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.wait(async move { request.await.map_err(ch_err) })
    }

    /// `run` for work that reports store errors itself.
    pub(crate) fn wait<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|_| StoreError::unavailable("the ClickHouse client stopped"))?
    }

    /// Runs a statement that returns nothing (DDL, ALTER).
    pub(crate) fn execute(&self, sql: String) -> Result<(), StoreError> {
        let client = self.client.clone();
        self.run(async move { client.query(&sql).execute().await })
    }

    /// Runs a statement on the server with no database chosen.
    pub(crate) fn execute_on_server(&self, sql: String) -> Result<(), StoreError> {
        let server = self.server.clone();
        self.run(async move { server.query(&sql).execute().await })
    }

    /// Runs a query and reads every row.
    pub(crate) fn fetch_all<T>(&self, query: clickhouse::query::Query) -> Result<Vec<T>, StoreError>
    where
        T: clickhouse::RowOwned + clickhouse::RowRead + Send,
    {
        self.run(async move { query.fetch_all::<T>().await })
    }
}

fn unreachable_runtime() -> ! {
    panic!("the ClickHouse runtime is taken only on drop")
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which an async context forbids: the store may be
        // dropped inside a server task.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A ClickHouse failure as the store reports it: unreachable or overloaded is
/// `Unavailable` (the caller may retry), a refused statement is `Corrupt` (a bug or a
/// schema that is not ours). Never carries credentials: the client's errors name the
/// server's answer, not the request.
pub(crate) fn ch_err(e: clickhouse::error::Error) -> StoreError {
    use clickhouse::error::Error as E;
    match e {
        E::Network(_) | E::TimedOut => StoreError::unavailable(format!("ClickHouse: {e}")),
        E::BadResponse(ref text) if text.contains("Code: 252") || text.contains("Code: 241") => {
            // Too many parts / memory limit: back off and retry.
            StoreError::busy(format!("ClickHouse is overloaded: {e}"))
        }
        E::BadResponse(ref text) if text.contains("Code: 159") => {
            // A time limit: a query's, or a node of the cluster not confirming DDL.
            StoreError::unavailable(format!("ClickHouse timed out: {e}"))
        }
        other => StoreError::corrupt(format!("ClickHouse: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_host_port_and_database_never_credentials() {
        let c = ClickHouseConfig::from_url("clickhouse://127.0.0.1:18123/tl_prod").unwrap();
        assert_eq!(c.url, "http://127.0.0.1:18123");
        assert_eq!(c.database, "tl_prod");
        let c = ClickHouseConfig::from_url("clickhouse://ch.internal").unwrap();
        assert_eq!(
            (c.url.as_str(), c.database.as_str()),
            ("http://ch.internal:8123", "threadline")
        );
        let e = ClickHouseConfig::from_url("clickhouse://bob:hunter2@host:8123/db").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(
            e.to_string().contains("THREADLINE_CLICKHOUSE_PASSWORD"),
            "{e}"
        );
        assert!(ClickHouseConfig::from_url("http://host:8123/db").is_err());
        assert!(ClickHouseConfig::from_url("clickhouse://host:8123/db;drop").is_err());
        let mut c = ClickHouseConfig::from_url("clickhouse://h:1/d").unwrap();
        c.password = Some("hunter2".into());
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn versions_compare_by_major_then_minor() {
        let v = ServerVersion::parse("18.16.1").unwrap();
        assert!(v.at_least(18, 16) && !v.at_least(19, 3));
        assert!(ServerVersion::parse("26.9.1.1").unwrap().at_least(21, 1));
        assert!(ServerVersion::parse("garbage").is_none());
    }
}
