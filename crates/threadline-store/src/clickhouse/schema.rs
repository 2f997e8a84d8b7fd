//! The ClickHouse schema: versioned migrations, each a list of statements templated by
//! the server's version (`Dialect`): Debian's 18.16 gets what it has, current releases
//! also get column codecs and skip indexes.
//!
//! Layout (ARCHITECTURE.md has the reasons and the cost per span):
//! Times are UInt64 nanoseconds only (partitions are days of them): no `DateTime`
//! beside them, and no Nullable (absent is empty, or `i64::MIN` for a number): each is
//! one more file per part on 18.16.
//! - `spans`: every span whole, `ORDER BY (tenant, trace_id, span_id)` — a trace is one
//!   range of the primary index per day partition. The detail and origin are postcard
//!   bytes (strings kept as sent, so a text scan can screen them), compressed by the
//!   column's codec.
//! - `span_search`: the narrow columns searches filter on, `ORDER BY (tenant, start_ns,
//!   trace_id, span_id)` — a time window is one range; attributes as `key=value`
//!   strings (the span's own first, then resource attributes it does not shadow), so
//!   `has()` is an exact filter: those of text keys (prompts, replies) in an array of
//!   their own (`texts`) that only free text and filters on such keys read, with the
//!   rest of the span's searchable text (status message, event texts) as `=text`.
//! - `logs`, `rollup_cells`, `hop_cells`, `incidents`, `detector_marks`, `operations`,
//!   `tenants`, `graph_events`, `leases`, `erasures`.
//!
//! Every table is a `ReplacingMergeTree` or append-only: a batch sent twice (a retry, a
//! spool replayed after a crash) collapses to one row per key on merge, and readers
//! never count a key twice before that (`LIMIT 1 BY`, `FINAL` or `DISTINCT`).
//! Parts dropped by merges and mutations leave the disk after `old_parts_lifetime`
//! seconds (set low here: erasure waits for it).

use crate::clickhouse::client::{Connection, ServerVersion};
use crate::StoreError;

/// Seconds an inactive part (merged away or rewritten by a mutation) stays on disk.
pub(crate) const OLD_PARTS_LIFETIME_S: u64 = 1;

/// What the server's version allows in DDL.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dialect {
    /// Column codecs (`CODEC(ZSTD(3))`): 19.10 and later.
    codecs: bool,
    /// Skip indexes (bloom_filter, tokenbf, set, minmax) without an experimental
    /// setting: 20.1 and later.
    skip_indexes: bool,
    /// LowCardinality without an experimental setting: 19.3 and later. Before, plain
    /// strings: an 18.16 part writes two more files per LowCardinality column, and
    /// creating files is most of what an insert costs the server there.
    low_cardinality: bool,
}

impl Dialect {
    pub(crate) fn of(version: ServerVersion) -> Self {
        Self {
            codecs: version.at_least(19, 10),
            skip_indexes: version.at_least(20, 1),
            low_cardinality: version.at_least(19, 3),
        }
    }

    /// A column codec for bulky bytes (detail, origin, cells).
    fn bulky(&self) -> &'static str {
        if self.codecs {
            " CODEC(ZSTD(3))"
        } else {
            ""
        }
    }

    /// Nanosecond times: delta-coded where codecs exist.
    fn times(&self) -> &'static str {
        if self.codecs {
            " CODEC(Delta, ZSTD(1))"
        } else {
            ""
        }
    }

    /// A string column of few distinct values.
    fn few(&self) -> &'static str {
        if self.low_cardinality {
            "LowCardinality(String)"
        } else {
            "String"
        }
    }

    fn index(&self, definition: &str) -> String {
        if self.skip_indexes {
            format!(",\n  INDEX {definition}")
        } else {
            String::new()
        }
    }
}

/// The table settings every MergeTree here takes.
fn settings() -> String {
    granular(8192)
}

/// `settings()` with `rows` rows per primary-index mark: a read by key decompresses a
/// mark's worth of every column it reads.
fn granular(rows: u32) -> String {
    format!("SETTINGS index_granularity = {rows}, old_parts_lifetime = {OLD_PARTS_LIFETIME_S}")
}

/// One migration: its version and the statements that make it.
struct Migration {
    version: u32,
    statements: fn(&str, Dialect) -> Vec<String>,
}

const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    statements: v1,
}];

/// The first schema: spans, search, logs, aggregates, incidents, the lineage log.
fn v1(db: &str, d: Dialect) -> Vec<String> {
    let lc = d.few();
    let (bulky, times) = (d.bulky(), d.times());
    let settings = settings();
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.spans (
  tenant {lc},
  trace_id FixedString(16),
  span_id FixedString(8),
  parent_span_id FixedString(8),
  has_parent UInt8,
  start_ns UInt64{times},
  duration_ns UInt64,
  service {lc},
  name {lc},
  kind UInt8,
  error UInt8,
  model {lc},
  session_id String,
  user_id String,
  total_tokens Int64,
  input_tokens Int64,
  output_tokens Int64,
  detail String{bulky},
  origin String{bulky},
  version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toDate(toDateTime(intDiv(start_ns, 1000000000)))
ORDER BY (tenant, trace_id, start_ns, span_id)
{spans_settings}",
            // A trace by id reads one mark of whole spans per day: 1,024 spans of
            // detail (≈ 0.7 MB) rather than 8,192.
            spans_settings = granular(1024),
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.span_search (
  tenant {lc},
  start_ns UInt64{times},
  trace_id FixedString(16),
  span_key UInt32,
  entry UInt8,
  service {lc},
  name {lc},
  duration_ns UInt64,
  error UInt8,
  model {lc},
  response_model {lc},
  route {lc},
  adapter {lc},
  ab_group {lc},
  instance {lc},
  image {lc},
  prompt_version {lc},
  session_id String,
  user_id String,
  folded UInt16,
  attributes Array(String),
  texts Array(String),
  version UInt64{session_index}{user_index}{attr_index}{trace_index}
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toDate(toDateTime(intDiv(start_ns, 1000000000)))
ORDER BY (tenant, start_ns, trace_id, span_key)
{settings}",
            session_index = d.index("session_bf session_id TYPE bloom_filter(0.01) GRANULARITY 4"),
            user_index = d.index("user_bf user_id TYPE bloom_filter(0.01) GRANULARITY 4"),
            attr_index = d.index("attributes_bf attributes TYPE bloom_filter(0.01) GRANULARITY 4"),
            trace_index = d.index("trace_bf trace_id TYPE bloom_filter(0.01) GRANULARITY 4"),
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.logs (
  tenant {lc},
  time_ns UInt64{times},
  seq Int64,
  trace_id FixedString(16),
  has_trace UInt8,
  span_id FixedString(8),
  has_span UInt8,
  service {lc},
  severity Int32,
  event_name {lc},
  user_id String,
  session_id String,
  detail String{bulky},
  origin String{bulky},
  version UInt64{trace_index}
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toDate(toDateTime(intDiv(time_ns, 1000000000)))
ORDER BY (tenant, time_ns, seq)
{settings}",
            trace_index = d.index("trace_bf trace_id TYPE bloom_filter(0.01) GRANULARITY 4"),
        ),
        // Rollup cells as each write computed them; readers merge a minute's cells.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.rollup_cells (
  tenant {lc},
  minute Int64,
  series String,
  cell String{bulky},
  batch UInt64
) ENGINE = ReplacingMergeTree(batch)
PARTITION BY intDiv(minute, 1440)
ORDER BY (tenant, minute, series, batch)
{settings}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.hop_cells (
  tenant {lc},
  minute Int64,
  caller {lc},
  callee {lc},
  cell String{bulky},
  batch UInt64
) ENGINE = ReplacingMergeTree(batch)
PARTITION BY intDiv(minute, 1440)
ORDER BY (tenant, minute, caller, callee, batch)
{settings}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.incidents (
  tenant {lc},
  id String,
  onset_minute Int64,
  body String{bulky},
  version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant, id)
{settings}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.detector_marks (
  tenant {lc},
  minute Int64,
  version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY tenant
{settings}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.operations (
  tenant {lc},
  service {lc},
  name {lc},
  kind UInt8
) ENGINE = ReplacingMergeTree()
ORDER BY (tenant, service, name, kind)
{settings}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.tenants (
  tenant String
) ENGINE = ReplacingMergeTree()
ORDER BY tenant
{settings}"
        ),
        // The lineage graph as the log of what changed it, in the order it was applied.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.graph_events (
  seq UInt64,
  tenant {lc},
  body String{bulky}
) ENGINE = ReplacingMergeTree()
ORDER BY seq
{settings}"
        ),
        // Who does the once-at-a-time work (`lease`): claims and renewals by term.
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.leases (
  name String,
  term UInt64,
  holder String,
  claim UInt8,
  stamp UInt64,
  expires_ns UInt64
) ENGINE = MergeTree()
ORDER BY (name, term, stamp)
{settings}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.erasures (
  tenant {lc},
  erasure_id Int64,
  requested_by String,
  requested_ns Int64,
  subject_kind String,
  subject_sha256 String,
  traces_matched UInt64,
  spans_deleted UInt64
) ENGINE = ReplacingMergeTree()
ORDER BY (tenant, erasure_id)
{settings}"
        ),
    ]
}

/// The newest schema version this build knows.
pub(crate) fn current_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The name of a table's rows on each node when the store is a cluster: `table` itself
/// is then the `Distributed` table over them.
pub(crate) fn local_table(table: &str) -> String {
    format!("{table}_local")
}

/// Deletes the rows of `table` that `predicate` selects (a mutation; on a cluster,
/// of the Replicated table on every node). A node that does not answer in time
/// applies it when it returns; the caller hears `Unavailable` and may repeat it.
pub(crate) fn delete_where(
    conn: &Connection,
    table: &str,
    predicate: &str,
) -> Result<(), StoreError> {
    let Some(cluster) = &conn.cluster else {
        return conn.execute(format!("ALTER TABLE {table} DELETE WHERE {predicate}"));
    };
    let local = local_table(table);
    conn.execute(format!(
        "ALTER TABLE {local} ON CLUSTER {cluster} DELETE WHERE {predicate}"
    ))
    .map_err(|e| {
        if e.to_string().contains("distributed_ddl_task_timeout") {
            StoreError::unavailable(format!(
                "a node of cluster {cluster} did not confirm a deletion in time (it applies \
                 it when it returns): repeat the request to confirm"
            ))
            .with_source(e)
        } else {
            e
        }
    })
}

/// How each table's rows spread over shards. Spans, their search rows and logs go by
/// trace, so a trace lives on one shard and a subquery by trace id runs shard by shard
/// (`distributed_product_mode = 'local'`); logs without a trace spread by their
/// sequence number. Everything else by its key: a row sent twice lands on the same
/// shard and collapses there.
fn shard_key(table: &str) -> Option<&'static str> {
    Some(match table {
        "spans" | "span_search" => "cityHash64(trace_id)",
        "logs" => "if(has_trace = 1, cityHash64(trace_id), cityHash64(seq))",
        "rollup_cells" => "cityHash64(series)",
        "hop_cells" => "cityHash64(caller, callee)",
        "incidents" => "cityHash64(id)",
        "detector_marks" | "tenants" => "cityHash64(tenant)",
        "operations" => "cityHash64(service, name)",
        "graph_events" => "cityHash64(seq)",
        "leases" => "cityHash64(name)",
        "erasures" => "cityHash64(erasure_id)",
        "schema_migrations" => "cityHash64(version)",
        _ => return None,
    })
}

/// One `CREATE TABLE IF NOT EXISTS {db}.NAME (…) ENGINE = Engine(args) …` made into
/// the two a cluster needs: `NAME_local` on every node (`ReplicatedEngine`, its
/// ZooKeeper path by the node's `{shard}` macro and its `{replica}`), and `NAME` as a
/// `Distributed` table over them, both `ON CLUSTER`.
fn clustered(db: &str, cluster: &str, statement: &str) -> Vec<String> {
    let prefix = format!("CREATE TABLE IF NOT EXISTS {db}.");
    let Some(rest) = statement.strip_prefix(&prefix) else {
        panic!(
            "the schema's statements are CREATE TABLEs; teach `clustered` this one: {statement}"
        );
    };
    let (Some(name_end), Some(engine_at)) = (rest.find(' '), rest.find(") ENGINE = ")) else {
        panic!("a CREATE TABLE of the schema has no ENGINE: {statement}");
    };
    let name = &rest[..name_end];
    let columns = &rest[name_end..engine_at + 1];
    let engine = &rest[engine_at + ") ENGINE = ".len()..];
    let (Some(args_at), Some(args_end)) = (engine.find('('), engine.find(')')) else {
        panic!("an engine of the schema has no arguments: {statement}");
    };
    let args = &engine[args_at + 1..args_end];
    let path = format!("'/clickhouse/tables/{{shard}}/{db}/{name}', '{{replica}}'");
    let args = if args.is_empty() {
        path
    } else {
        format!("{path}, {args}")
    };
    let key = shard_key(name).unwrap_or_else(|| panic!("table {name} has no shard key"));
    let local = local_table(name);
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{local} ON CLUSTER {cluster}{columns} ENGINE = Replicated{}({args}){}",
            &engine[..args_at],
            &engine[args_end + 1..]
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.{name} ON CLUSTER {cluster} AS {db}.{local} \
             ENGINE = Distributed({cluster}, {db}, {local}, {key})"
        ),
    ]
}

/// The system tables an erasure waits on (`system.mutations`, `system.parts`) as seen
/// across the cluster: `cluster_mutations` and `cluster_parts`, read from each shard's
/// replica that answers reads.
fn cluster_system(db: &str, cluster: &str) -> Vec<String> {
    ["mutations", "parts"]
        .iter()
        .map(|t| {
            format!(
                "CREATE TABLE IF NOT EXISTS {db}.cluster_{t} ON CLUSTER {cluster} AS system.{t} \
                 ENGINE = Distributed({cluster}, system, {t})"
            )
        })
        .collect()
}

/// Every statement of every migration after `from`, in order (what `migrate` runs;
/// also what the chdb check runs on a current engine).
pub(crate) fn statements_after(db: &str, dialect: Dialect, from: u32) -> Vec<(u32, String)> {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > from)
        .flat_map(|m| {
            (m.statements)(db, dialect)
                .into_iter()
                .map(move |s| (m.version, s))
        })
        .collect()
}

/// Creates the database and brings its schema to `current_version`. Statements are
/// idempotent (`IF NOT EXISTS`), so two replicas migrating at once both succeed. On a
/// cluster every statement runs `ON CLUSTER` (`clustered`), which waits for every node:
/// creating or migrating needs them all up; opening a store already current does not.
pub(crate) fn migrate(conn: &Connection, db: &str) -> Result<u32, StoreError> {
    let cluster = conn.cluster.clone();
    let run = |statement: String| -> Result<(), StoreError> {
        match &cluster {
            None => conn.execute(statement),
            Some(cluster) => clustered(db, cluster, &statement)
                .into_iter()
                .try_for_each(|s| conn.execute_on_server(s)),
        }
    };
    if !schema_table_exists(conn, db)? {
        match &cluster {
            None => conn.execute_on_server(format!("CREATE DATABASE IF NOT EXISTS {db}"))?,
            Some(cluster) => conn.execute_on_server(format!(
                "CREATE DATABASE IF NOT EXISTS {db} ON CLUSTER {cluster}"
            ))?,
        }
        run(format!(
            "CREATE TABLE IF NOT EXISTS {db}.schema_migrations (version UInt32, applied_ns UInt64\n) \
             ENGINE = ReplacingMergeTree() ORDER BY version"
        ))?;
        if let Some(cluster) = &cluster {
            for statement in cluster_system(db, cluster) {
                conn.execute_on_server(statement)?;
            }
        }
    }
    let applied: u32 = {
        let client = conn.client.clone();
        let sql = format!("SELECT toUInt32(max(version)) FROM {db}.schema_migrations");
        conn.run(async move { client.query(&sql).fetch_one::<u32>().await })?
    };
    if applied > current_version() {
        return Err(StoreError::corrupt(format!(
            "database {db} has schema version {applied}; this Threadline knows up to {}: \
             upgrade Threadline",
            current_version()
        )));
    }
    let dialect = Dialect::of(conn.version);
    let mut done = applied;
    for (version, statement) in statements_after(db, dialect, applied) {
        if version > done {
            if done > applied {
                record(conn, db, done)?;
            }
            done = version;
        }
        run(statement)?;
    }
    if done > applied {
        record(conn, db, done)?;
    }
    Ok(done)
}

/// Whether `db.schema_migrations` exists on the server Threadline talks to.
fn schema_table_exists(conn: &Connection, db: &str) -> Result<bool, StoreError> {
    let client = conn.server.clone();
    let sql = format!(
        "SELECT count() FROM system.tables WHERE database = '{db}' AND name = 'schema_migrations'"
    );
    let n: u64 = conn.run(async move { client.query(&sql).fetch_one::<u64>().await })?;
    Ok(n > 0)
}

fn record(conn: &Connection, db: &str, version: u32) -> Result<(), StoreError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    conn.execute(format!(
        "INSERT INTO {db}.schema_migrations (version, applied_ns) VALUES ({version}, {now})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_cluster_every_table_is_replicated_on_each_node_behind_a_distributed_one() {
        let version = ServerVersion {
            major: 18,
            minor: 16,
        };
        for (_, statement) in statements_after("db", Dialect::of(version), 0) {
            let [local, distributed] = &clustered("db", "c", &statement)[..] else {
                panic!("two statements for {statement}");
            };
            let name = statement["CREATE TABLE IF NOT EXISTS db.".len()..]
                .split(' ')
                .next()
                .unwrap();
            assert!(
                local.starts_with(&format!(
                    "CREATE TABLE IF NOT EXISTS db.{name}_local ON CLUSTER c ("
                )),
                "{local}"
            );
            assert!(
                local.contains(&format!(
                    "ENGINE = Replicated{}('/clickhouse/tables/{{shard}}/db/{name}', '{{replica}}'",
                    statement
                        .split(") ENGINE = ")
                        .nth(1)
                        .unwrap()
                        .split('(')
                        .next()
                        .unwrap()
                )),
                "{local}"
            );
            // Everything after the engine (partitions, order, settings) is kept.
            assert!(local.ends_with(
                statement
                    .split(") ENGINE = ")
                    .nth(1)
                    .unwrap()
                    .split_once(')')
                    .unwrap()
                    .1
            ));
            assert!(distributed.starts_with(&format!(
                "CREATE TABLE IF NOT EXISTS db.{name} ON CLUSTER c AS db.{name}_local ENGINE = Distributed(c, db, {name}_local, "
            )), "{distributed}");
        }
        let plain = clustered(
            "db",
            "c",
            "CREATE TABLE IF NOT EXISTS db.leases (\n  name String\n) ENGINE = MergeTree()\nORDER BY name",
        );
        assert_eq!(
            plain[0],
            "CREATE TABLE IF NOT EXISTS db.leases_local ON CLUSTER c (\n  name String\n) ENGINE = \
             ReplicatedMergeTree('/clickhouse/tables/{shard}/db/leases', '{replica}')\nORDER BY name"
        );
    }

    #[test]
    fn old_servers_get_no_codecs_or_skip_indexes_current_ones_do() {
        let old = statements_after(
            "db",
            Dialect::of(ServerVersion {
                major: 18,
                minor: 16,
            }),
            0,
        );
        let new = statements_after(
            "db",
            Dialect::of(ServerVersion {
                major: 26,
                minor: 9,
            }),
            0,
        );
        assert_eq!(old.len(), new.len());
        assert!(old
            .iter()
            .all(|(_, s)| !s.contains("CODEC") && !s.contains("INDEX")));
        assert!(new.iter().any(|(_, s)| s.contains("CODEC(ZSTD(3))")));
        assert!(new.iter().any(|(_, s)| s.contains("TYPE bloom_filter")));
        assert!(statements_after(
            "db",
            Dialect::of(ServerVersion {
                major: 18,
                minor: 16
            }),
            current_version()
        )
        .is_empty());
    }
}
