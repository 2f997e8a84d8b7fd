//! Where the server keeps its data: the embedded store under the data directory (the
//! default) or a ClickHouse database (`--store clickhouse://HOST:PORT/DATABASE`, or
//! `[server] store`), with the user and password from `[clickhouse]` or the
//! environment — never from the command line, never logged.

use serde::Deserialize;
use threadline_store::ClickHouseConfig;

/// The environment variables that carry ClickHouse credentials (they win over the file).
pub const CLICKHOUSE_USER_ENV: &str = "THREADLINE_CLICKHOUSE_USER";
pub const CLICKHOUSE_PASSWORD_ENV: &str = "THREADLINE_CLICKHOUSE_PASSWORD";

/// The store the server opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreLocation {
    /// SQLite under `data_dir`.
    #[default]
    Embedded,
    ClickHouse {
        config: ClickHouseConfig,
        /// Bytes of writes the local spool holds while ClickHouse does not take them
        /// (`[clickhouse] spool_max_bytes`, default 1 GiB); past them, 429.
        spool_max_bytes: u64,
    },
}

/// The spool's bound when the file sets none.
pub(super) const DEFAULT_SPOOL_MAX_BYTES: u64 = 1 << 30;

/// `[clickhouse]`: who Threadline is on the server, and the cluster to go through.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileClickHouse {
    user: Option<String>,
    password: Option<String>,
    cluster: Option<String>,
    spool_max_bytes: Option<u64>,
    /// Milliseconds a search's first page may take (0: no bound).
    first_page_budget_ms: Option<u64>,
}

impl std::fmt::Debug for FileClickHouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileClickHouse")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("cluster", &self.cluster)
            .field("spool_max_bytes", &self.spool_max_bytes)
            .field("first_page_budget_ms", &self.first_page_budget_ms)
            .finish()
    }
}

/// The store `url` names (`None` or `"embedded"`: the embedded store), with credentials
/// from the environment (`env`) or else the file. Problems go to `problems`.
pub(super) fn resolve(
    url: Option<&str>,
    file: FileClickHouse,
    env: impl Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> StoreLocation {
    let url = match url.map(str::trim) {
        None | Some("") | Some("embedded") => {
            if file.user.is_some()
                || file.password.is_some()
                || file.cluster.is_some()
                || file.spool_max_bytes.is_some()
                || file.first_page_budget_ms.is_some()
            {
                problems.push(
                    "[clickhouse] is set but the store is the embedded one: set [server] store \
                     or --store to clickhouse://HOST:PORT/DATABASE"
                        .to_owned(),
                );
            }
            return StoreLocation::Embedded;
        }
        Some(url) => url,
    };
    match ClickHouseConfig::from_url(url) {
        Ok(mut config) => {
            config.user = env(CLICKHOUSE_USER_ENV).or(file.user);
            config.password = env(CLICKHOUSE_PASSWORD_ENV).or(file.password);
            // Through a cluster of the server's remote_servers (the store checks the
            // name when it opens).
            config.cluster = file.cluster;
            if let Some(ms) = file.first_page_budget_ms {
                config.first_page_budget = (ms > 0).then(|| std::time::Duration::from_millis(ms));
            }
            let spool_max_bytes = file.spool_max_bytes.unwrap_or(DEFAULT_SPOOL_MAX_BYTES);
            if spool_max_bytes < 1 << 20 {
                problems.push(format!(
                    "clickhouse.spool_max_bytes ({spool_max_bytes}) must be at least 1 MiB"
                ));
            }
            StoreLocation::ClickHouse {
                config,
                spool_max_bytes,
            }
        }
        Err(e) => {
            problems.push(format!("store: {e}"));
            StoreLocation::Embedded
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(user: Option<&str>, password: Option<&str>) -> FileClickHouse {
        FileClickHouse {
            user: user.map(str::to_owned),
            password: password.map(str::to_owned),
            cluster: None,
            spool_max_bytes: None,
            first_page_budget_ms: None,
        }
    }

    #[test]
    fn credentials_come_from_the_environment_first_then_the_file() {
        let mut problems = Vec::new();
        let env = |name: &str| (name == CLICKHOUSE_PASSWORD_ENV).then(|| "from-env".to_owned());
        let StoreLocation::ClickHouse { config: c, .. } = resolve(
            Some("clickhouse://127.0.0.1:18123/tl"),
            file(Some("tl"), Some("from-file")),
            env,
            &mut problems,
        ) else {
            panic!("a ClickHouse URL names ClickHouse");
        };
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.user.as_deref(), Some("tl"));
        assert_eq!(c.password.as_deref(), Some("from-env"));
        assert!(!format!("{c:?}").contains("from-env"));
    }

    #[test]
    fn the_embedded_store_is_the_default_and_bad_urls_are_named() {
        let mut problems = Vec::new();
        assert_eq!(
            resolve(None, file(None, None), |_| None, &mut problems),
            StoreLocation::Embedded
        );
        assert!(problems.is_empty());
        resolve(
            Some("clickhouse://u:secret@h:1/db"),
            file(None, None),
            |_| None,
            &mut problems,
        );
        assert_eq!(problems.len(), 1);
        assert!(!problems[0].contains("secret"), "{problems:?}");
        resolve(None, file(Some("u"), None), |_| None, &mut problems);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let clustered = FileClickHouse {
            cluster: Some("two_shards".into()),
            ..file(None, None)
        };
        let StoreLocation::ClickHouse { config, .. } = resolve(
            Some("clickhouse://h:1/db"),
            clustered,
            |_| None,
            &mut problems,
        ) else {
            panic!("a ClickHouse URL names ClickHouse");
        };
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(config.cluster.as_deref(), Some("two_shards"));
    }
}
