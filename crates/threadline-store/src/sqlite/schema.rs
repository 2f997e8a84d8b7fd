//! The SQLite schema and its migrations. Each migration runs once, in order, inside a
//! transaction; `PRAGMA user_version` records how far a database has come.

use std::path::Path;

use rusqlite::Connection;

use crate::sqlite::StoreError;

/// Migrations in order; index + 1 is the schema version they lead to.
const MIGRATIONS: &[&str] = &[
    // 1: tenants, deduplicated span origins (resource + scope), detail blocks, spans and
    //    their indexes, and the trace ids of each block (the trace-by-id index).
    "CREATE TABLE tenants (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE
     );
     CREATE TABLE span_origins (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        origin_hash INTEGER NOT NULL,
        origin BLOB NOT NULL,
        PRIMARY KEY (tenant_id, origin_hash)
     ) WITHOUT ROWID;
     CREATE TABLE span_blocks (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        block BLOB NOT NULL
     );
     CREATE TABLE spans (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        trace_id BLOB NOT NULL,
        span_id BLOB NOT NULL,
        parent_span_id BLOB,
        name TEXT NOT NULL,
        service TEXT NOT NULL,
        kind INTEGER NOT NULL,
        start_ns INTEGER NOT NULL,
        end_ns INTEGER NOT NULL,
        duration_ns INTEGER NOT NULL,
        status_code INTEGER NOT NULL,
        origin_hash INTEGER NOT NULL,
        model TEXT,
        route TEXT,
        adapter TEXT,
        ab_group TEXT,
        instance TEXT,
        image TEXT,
        prompt_version TEXT,
        user_id TEXT,
        session_id TEXT,
        total_tokens INTEGER,
        block_id INTEGER NOT NULL REFERENCES span_blocks(id),
        block_offset INTEGER NOT NULL,
        block_len INTEGER NOT NULL
     );
     CREATE TABLE block_traces (
        tenant_id INTEGER NOT NULL,
        block_id INTEGER NOT NULL,
        first_span_rowid INTEGER NOT NULL,
        last_span_rowid INTEGER NOT NULL,
        min_start_ns INTEGER NOT NULL,
        max_start_ns INTEGER NOT NULL,
        trace_ids BLOB NOT NULL,
        PRIMARY KEY (tenant_id, block_id)
     ) WITHOUT ROWID;
     CREATE INDEX spans_by_time ON spans (tenant_id, start_ns);
     CREATE INDEX spans_by_service ON spans (tenant_id, service, start_ns);
     CREATE INDEX spans_by_model ON spans (tenant_id, model, start_ns) WHERE model IS NOT NULL;
     CREATE INDEX spans_by_route ON spans (tenant_id, route, start_ns) WHERE route IS NOT NULL;
     CREATE INDEX spans_by_adapter ON spans (tenant_id, adapter, start_ns) WHERE adapter IS NOT NULL;
     CREATE INDEX spans_with_error ON spans (tenant_id, start_ns) WHERE status_code = 2;",
    // 2: the lineage graph. Node ids are per tenant; `name` is the last `:`-segment of
    //    the key so a bare name ("fin-qa" for dataset:warehouse:fin-qa) resolves. Runs
    //    and dataset versions (random keys, one per event) are left out of that index:
    //    each would cost a random page write, and their keys resolve exactly anyway.
    //    Edges point the way data flows (src feeds dst). The keys of applied
    //    OpenLineage events (subject, type, time) make a re-sent event a no-op; the
    //    events' facets live on the nodes they describe.
    "CREATE TABLE graph_nodes (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        name TEXT NOT NULL,
        first_seen_ns INTEGER NOT NULL,
        last_seen_ns INTEGER NOT NULL,
        props TEXT NOT NULL DEFAULT '{}',
        UNIQUE (tenant_id, kind, key)
     );
     CREATE INDEX graph_nodes_by_name ON graph_nodes (tenant_id, name)
        WHERE kind NOT IN ('run', 'dataset_version');
     CREATE TABLE graph_edges (
        src INTEGER NOT NULL REFERENCES graph_nodes(id),
        dst INTEGER NOT NULL REFERENCES graph_nodes(id),
        kind TEXT NOT NULL,
        tenant_id INTEGER NOT NULL,
        first_seen_ns INTEGER NOT NULL,
        last_seen_ns INTEGER NOT NULL,
        evidence TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (src, kind, dst)
     ) WITHOUT ROWID;
     CREATE INDEX graph_edges_by_dst ON graph_edges (dst, kind, src);
     CREATE TABLE lineage_events (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        subject TEXT NOT NULL,
        event_type TEXT NOT NULL,
        event_time TEXT NOT NULL,
        received_ns INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, subject, event_type, event_time)
     ) WITHOUT ROWID;",
    // 3: registry revisions: every distinct spec a registry node was registered with.
    "CREATE TABLE asset_revisions (
        node_id INTEGER NOT NULL REFERENCES graph_nodes(id),
        revision INTEGER NOT NULL,
        spec_sha256 TEXT NOT NULL,
        spec TEXT NOT NULL,
        registered_ns INTEGER NOT NULL,
        PRIMARY KEY (node_id, revision)
     ) WITHOUT ROWID;",
    // 4: the erasure audit log. The subject is kept only as a SHA-256 digest, so the
    //    log itself never holds the erased id.
    "CREATE TABLE erasures (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        requested_by TEXT NOT NULL,
        requested_ns INTEGER NOT NULL,
        subject_kind TEXT NOT NULL,
        subject_sha256 TEXT NOT NULL,
        traces_matched INTEGER NOT NULL,
        spans_deleted INTEGER NOT NULL,
        blocks_rewritten INTEGER NOT NULL
     );",
    // 5: runs by the trace id their OpenLineage parent facet carries, so a trace finds
    //    the pipeline runs that name it.
    "CREATE INDEX graph_runs_by_trace ON graph_nodes (tenant_id, json_extract(props, '$.trace_id'))
        WHERE kind = 'run';",
    // 6: diagnosis. Rollup cells per tenant, minute of span time and series (the
    //    dimension values, canonical text); `store_marks.rollups_through_block` is the
    //    last detail block whose spans are in the rollups (the rest is replayed at open).
    //    Incidents found by the streaming detector, and how far it has looked.
    "CREATE TABLE rollup_series (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        dims TEXT NOT NULL,
        UNIQUE (tenant_id, dims)
     );
     CREATE TABLE rollups (
        tenant_id INTEGER NOT NULL,
        minute INTEGER NOT NULL,
        series_id INTEGER NOT NULL REFERENCES rollup_series(id),
        cell BLOB NOT NULL,
        PRIMARY KEY (tenant_id, minute, series_id)
     ) WITHOUT ROWID;
     CREATE TABLE store_marks (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
     ) WITHOUT ROWID;
     CREATE TABLE incidents (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id),
        id TEXT NOT NULL,
        onset_minute INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (tenant_id, id)
     ) WITHOUT ROWID;
     CREATE INDEX incidents_by_onset ON incidents (tenant_id, onset_minute);
     CREATE TABLE detector_marks (
        tenant_id INTEGER PRIMARY KEY REFERENCES tenants(id),
        processed_minute INTEGER NOT NULL
     );",
    // 7: a dataset's versions by when they were first seen, so "the newest version" and
    //    "the version before this one" are index seeks, not scans of every version a
    //    dataset ever had (a daily job's table has hundreds).
    "CREATE INDEX graph_versions_by_time ON graph_edges (src, first_seen_ns, dst)
        WHERE kind = 'has_version';",
    // 8: span indexes keyed by detail block instead of start time. Blocks are numbered
    //    in arrival order, so a commit appends at the end of each index range; keyed by
    //    start time, its spans landed on pages all over the last few seconds (spans
    //    arrive out of start order by up to a trace's length), and those index pages
    //    were ≈ 78% of the WAL written per commit. Time ranges go through each block's
    //    span-time zone (`block_traces.min_start_ns..=max_start_ns`), indexed here by
    //    its newest start and covering the block's rows (see `newest_first`).
    "DROP INDEX spans_by_time;
     DROP INDEX spans_by_service;
     DROP INDEX spans_by_model;
     DROP INDEX spans_by_route;
     DROP INDEX spans_by_adapter;
     DROP INDEX spans_with_error;
     CREATE INDEX spans_by_service ON spans (tenant_id, service, block_id);
     CREATE INDEX spans_by_model ON spans (tenant_id, model, block_id) WHERE model IS NOT NULL;
     CREATE INDEX spans_by_route ON spans (tenant_id, route, block_id) WHERE route IS NOT NULL;
     CREATE INDEX spans_by_adapter ON spans (tenant_id, adapter, block_id) WHERE adapter IS NOT NULL;
     CREATE INDEX spans_with_error ON spans (tenant_id, block_id) WHERE status_code = 2;
     CREATE INDEX blocks_by_newest_start ON block_traces
        (tenant_id, max_start_ns, min_start_ns, first_span_rowid, last_span_rowid);",
    // 9: input and output tokens per span, so a trace summary can be priced per model
    //    (the price table lives in the server's config; rows written before read NULL).
    "ALTER TABLE spans ADD COLUMN input_tokens INTEGER;
     ALTER TABLE spans ADD COLUMN output_tokens INTEGER;",
    // 10: the trace-id index (`trace_index`): sorted runs of (trace id, block id)
    //    entries built and merged in the background, cut into chunks keyed by their
    //    first trace id. Both tables are appended to in key order (run ids grow).
    //    Existing stores are indexed by the compactor after opening.
    "CREATE TABLE trace_runs (
        run_id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL,
        level INTEGER NOT NULL,
        first_block INTEGER NOT NULL,
        last_block INTEGER NOT NULL,
        entries INTEGER NOT NULL
     );
     CREATE INDEX trace_runs_by_tenant ON trace_runs (tenant_id, last_block);
     CREATE TABLE trace_run_chunks (
        run_id INTEGER NOT NULL,
        first_id BLOB NOT NULL,
        entries BLOB NOT NULL
     );
     CREATE INDEX trace_run_chunks_by_id ON trace_run_chunks (run_id, first_id);",
    // 11: per-block attribute filters (`attr_filter`), appended with each block.
    //    Blocks stored before have none and are read whole by attribute searches.
    "CREATE TABLE block_attr_filters (
        tenant_id INTEGER NOT NULL,
        block_id INTEGER NOT NULL,
        filter BLOB NOT NULL,
        PRIMARY KEY (tenant_id, block_id)
     ) WITHOUT ROWID;",
    // 12: the distinct services and models of each tenant, so that service and model
    //    filters (case-insensitive, by prefix) resolve to the exact stored values the
    //    span indexes are keyed by, and the responding model when it is not the
    //    requested one (`response_model`; '' in `tenant_models` when the same).
    "ALTER TABLE spans ADD COLUMN response_model TEXT;
     CREATE TABLE tenant_services (
        tenant_id INTEGER NOT NULL,
        service TEXT NOT NULL,
        PRIMARY KEY (tenant_id, service)
     ) WITHOUT ROWID;
     CREATE TABLE tenant_models (
        tenant_id INTEGER NOT NULL,
        model TEXT NOT NULL,
        response_model TEXT NOT NULL,
        PRIMARY KEY (tenant_id, model, response_model)
     ) WITHOUT ROWID;
     INSERT OR IGNORE INTO tenant_services SELECT DISTINCT tenant_id, service FROM spans;
     INSERT OR IGNORE INTO tenant_models
        SELECT DISTINCT tenant_id, model, '' FROM spans WHERE model IS NOT NULL;",
    // 13: the full-text index (`text_index`): one document of distinct words per detail
    //    block, no content, no positions; deletes remove the words from its pages
    //    (`secure-delete`). Blocks stored before it are read span by span.
    "CREATE VIRTUAL TABLE block_text USING fts5(
        terms, content = '', columnsize = 0, detail = none, tokenize = 'ascii'
     );
     INSERT INTO block_text (block_text, rank) VALUES ('secure-delete', 1);
     CREATE TABLE block_text_start (first_block_id INTEGER NOT NULL);
     INSERT INTO block_text_start SELECT coalesce(max(id), 0) + 1 FROM span_blocks;",
    // 14: log records (`logs`): rows by trace, time, block and subject; details in
    //    compressed blocks; origins shared with spans; a full-text index like spans'.
    "CREATE TABLE log_blocks (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL,
        block BLOB NOT NULL
     );
     CREATE TABLE logs (
        tenant_id INTEGER NOT NULL,
        trace_id BLOB,
        span_id BLOB,
        time_ns INTEGER NOT NULL,
        severity INTEGER NOT NULL,
        event_name TEXT NOT NULL,
        service TEXT NOT NULL,
        origin_hash INTEGER NOT NULL,
        user_id TEXT,
        session_id TEXT,
        block_id INTEGER NOT NULL,
        block_offset INTEGER NOT NULL,
        block_len INTEGER NOT NULL
     );
     CREATE INDEX logs_by_trace ON logs (tenant_id, trace_id) WHERE trace_id IS NOT NULL;
     CREATE INDEX logs_by_time ON logs (tenant_id, time_ns);
     CREATE INDEX logs_by_block ON logs (block_id);
     CREATE INDEX logs_by_user ON logs (tenant_id, user_id) WHERE user_id IS NOT NULL;
     CREATE INDEX logs_by_session ON logs (tenant_id, session_id) WHERE session_id IS NOT NULL;
     CREATE VIRTUAL TABLE log_text USING fts5(
        terms, content = '', columnsize = 0, detail = none, tokenize = 'ascii'
     );
     INSERT INTO log_text (log_text, rank) VALUES ('secure-delete', 1);",
    // 15: the full-text index is built in the background (`text_indexer`), one
    //    document per group of `TEXT_GROUP_BLOCKS` consecutive blocks; blocks from
    //    `indexed_end` on are read span by span. Every stored block is indexed anew,
    //    those stored before 13 included; `erasures` counts erasures, so that a
    //    document built from blocks an erasure has since changed is not written.
    "CREATE VIRTUAL TABLE text_groups USING fts5(
        terms, content = '', columnsize = 0, detail = none, tokenize = 'ascii'
     );
     INSERT INTO text_groups (text_groups, rank) VALUES ('secure-delete', 1);
     CREATE TABLE text_index_state (
        indexed_end INTEGER NOT NULL,
        erasures INTEGER NOT NULL
     );
     INSERT INTO text_index_state VALUES (0, 0);
     DROP TABLE block_text;
     DROP TABLE block_text_start;",
    // 16: per-block column values (`block_values`) instead of per-span indexes on
    //    those columns: one row per distinct value per block, not one entry per span.
    //    Field codes are `ValueField::code`'s. The distinct operations of each tenant
    //    (`tenant_operations`), so listing them reads no span.
    "CREATE TABLE block_values (
        tenant_id INTEGER NOT NULL,
        field INTEGER NOT NULL,
        value TEXT NOT NULL,
        block_id INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, field, value, block_id)
     ) WITHOUT ROWID;
     INSERT OR IGNORE INTO block_values
        SELECT DISTINCT tenant_id, 1, service, block_id FROM spans
        UNION ALL SELECT DISTINCT tenant_id, 2, model, block_id FROM spans WHERE model IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 3, route, block_id FROM spans WHERE route IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 4, adapter, block_id FROM spans WHERE adapter IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 5, instance, block_id FROM spans WHERE instance IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 6, image, block_id FROM spans WHERE image IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 7, prompt_version, block_id FROM spans
            WHERE prompt_version IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 8, ab_group, block_id FROM spans WHERE ab_group IS NOT NULL
        UNION ALL SELECT DISTINCT tenant_id, 9, '', block_id FROM spans WHERE status_code = 2;
     DROP INDEX spans_by_service;
     DROP INDEX spans_by_model;
     DROP INDEX spans_by_route;
     DROP INDEX spans_by_adapter;
     DROP INDEX spans_with_error;
     CREATE TABLE tenant_operations (
        tenant_id INTEGER NOT NULL,
        service TEXT NOT NULL,
        name TEXT NOT NULL,
        kind INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, service, name, kind)
     ) WITHOUT ROWID;
     INSERT OR IGNORE INTO tenant_operations SELECT DISTINCT tenant_id, service, name, kind FROM spans;",
    // 17: rollups at two levels — requests measured whole on their route's entry span
    //    (with where their time went), model calls on their own — replace the cells
    //    that counted a request on its model call. The cells are recomputed from the
    //    stored spans: dropping them and the mark makes the open replay every block.
    "DELETE FROM rollups;
     DELETE FROM rollup_series;
     DELETE FROM store_marks WHERE name = 'rollups_through_block';",
    // 18: a Bloom filter of each trace-id run's trace ids (`trace_index`), written with
    //    the run's catalog row; runs listed before get theirs from the compactor.
    "CREATE TABLE trace_run_filters (
        run_id INTEGER PRIMARY KEY,
        filter BLOB NOT NULL
     );",
    // 19: edges a registry declared (not observed), and their validity: from the
    //    revision that named them or a deployment's `from` (NULL: from the start), until
    //    the revision that no longer did or a deployment's `to` (NULL: still holds).
    "ALTER TABLE graph_edges ADD COLUMN declared INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE graph_edges ADD COLUMN valid_from_ns INTEGER;
     ALTER TABLE graph_edges ADD COLUMN superseded_ns INTEGER;",
    // 20: the distinct (session, user) pairs of each block (`sessions`), one row per
    //    block appended as blocks are (no write lands among older rows): the session
    //    list reads them newest block first.
    "CREATE TABLE block_sessions (
        tenant_id INTEGER NOT NULL,
        block_id INTEGER NOT NULL,
        pairs TEXT NOT NULL,
        PRIMARY KEY (tenant_id, block_id)
     ) WITHOUT ROWID;
     INSERT INTO block_sessions
        SELECT tenant_id, block_id, group_concat(pair, char(10)) FROM (
            SELECT DISTINCT tenant_id, block_id, session_id || char(9) || coalesce(user_id, '') AS pair
            FROM spans WHERE session_id IS NOT NULL ORDER BY tenant_id, block_id, pair)
        GROUP BY tenant_id, block_id;",
    // 21: calls between services per minute (`hops`): what the service map draws.
    "CREATE TABLE service_hops (
        tenant_id INTEGER NOT NULL,
        minute INTEGER NOT NULL,
        caller TEXT NOT NULL,
        callee TEXT NOT NULL,
        cell BLOB NOT NULL,
        PRIMARY KEY (tenant_id, minute, caller, callee)
     ) WITHOUT ROWID;",
];

pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Maps a SQLite error on the database at `path` to the store's error.
pub(crate) fn sqlite(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| super::sqlite_error(path, source)
}

/// The writer's connection: WAL with `synchronous = NORMAL` — commits do not fsync; the
/// writer's syncer thread fsyncs the WAL before any ack (see `writer`), and checkpoints
/// sync the WAL before and the database after copying (group commit keeps the fsync
/// cost per batch, not per span).
/// Automatic checkpoints are off here: the checkpointer thread runs them, so copying
/// WAL pages into the database never stalls the writer. `secure_delete` zeroes what
/// is deleted (the store deletes only for erasure), so no byte of it stays in a page.
/// The page cache is small (8 MB) and reads go through a memory map: SQLite's B-tree
/// balancing parks a page at the lock page's number for a moment, after which every
/// commit of a database under 1 GB scans the whole page-cache hash table (9% of the
/// writer's time with 64 MB on OpenLineage ingest, 3.8% with 8 MB).
pub(crate) fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(sqlite(path))?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = OFF;
         PRAGMA busy_timeout = 5000;
         PRAGMA cache_size = -8192;
         PRAGMA mmap_size = {WRITER_MMAP_BYTES};
         PRAGMA wal_autocheckpoint = 0;
         PRAGMA secure_delete = ON;"
    ))
    .map_err(sqlite(path))?;
    Ok(conn)
}

/// The most of the database the writer maps (SQLite caps it at its own maximum,
/// 2 GB by default).
const WRITER_MMAP_BYTES: u64 = 4 << 30;

/// Drops the writer's memory map of the database; the next read maps it again.
/// Between transactions only. Each page fault on the map also maps the up to 15 cached
/// pages around it (the kernel's fault-around), and as checkpoints move the hot end of
/// the file, those stay resident in the process: 86 MB after 20 s at full ingest
/// speed, 18 MB remapping every few WAL restarts, at no measurable cost in spans/s
/// (BENCHMARKS.md).
pub(crate) fn remap_writer(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "PRAGMA mmap_size = 0; PRAGMA mmap_size = {WRITER_MMAP_BYTES};"
    ))
}

pub(crate) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    // No memory map: a page the OS no longer caches costs a fault on a mapped file,
    // and the kernel fills such a fault with read-around of the device's whole
    // readahead window (8 MB on this project's VMs: 2–4 ms), where a read() of a cold
    // page reads that page and a little ahead. Cold pages are ordinary: proactive
    // reclaim (DAMON on these VMs) drops file pages unused for a minute, so a lookup in
    // a large store meets some. The 32 MB page cache per reader keeps hot pages.
    let conn = read_only(path, "PRAGMA cache_size = -32768; PRAGMA mmap_size = 0;")?;
    crate::sqlite::attr_filter::register(&conn).map_err(sqlite(path))?;
    Ok(conn)
}

/// A reader for a background thread that streams through data once (the trace-index
/// compactor): a small page cache and no memory map, so what it reads is not held in
/// the server's resident memory.
pub(crate) fn open_background_reader(path: &Path) -> Result<Connection, StoreError> {
    read_only(path, "PRAGMA cache_size = -2048; PRAGMA mmap_size = 0;")
}

fn read_only(path: &Path, pragmas: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite(path))?;
    conn.execute_batch(&format!("PRAGMA busy_timeout = 5000; {pragmas}"))
        .map_err(sqlite(path))?;
    Ok(conn)
}

pub(crate) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let current: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sqlite(path))?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::unavailable(format!(
            "database {} has schema version {current}, newer than this binary's {SCHEMA_VERSION}",
            path.display()
        )));
    }
    for (idx, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction().map_err(sqlite(path))?;
        tx.execute_batch(sql).map_err(sqlite(path))?;
        tx.pragma_update(None, "user_version", idx as i64 + 1)
            .map_err(sqlite(path))?;
        tx.commit().map_err(sqlite(path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::search::{search, TraceQuery};
    use threadline_model::{TenantId, TraceId};

    /// A database written before migration 8 (span indexes keyed by start time) is
    /// upgraded in place, and its spans are found through the block values migration
    /// 16 made of its rows, and through the zones.
    #[test]
    fn migrations_8_and_16_reindex_the_spans_of_a_populated_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threadline.db");
        let mut conn = Connection::open(&path).unwrap();
        for (idx, sql) in MIGRATIONS[..7].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", idx as i64 + 1)
                .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO tenants (id, name) VALUES (1, 'acme');
             INSERT INTO span_blocks (id, tenant_id, block) VALUES (1, 1, x'00');",
        )
        .unwrap();
        let mut trace_ids = Vec::new();
        for t in 1..=3u8 {
            conn.execute(
                "INSERT INTO spans (tenant_id, trace_id, span_id, name, service, kind, start_ns,
                    end_ns, duration_ns, status_code, origin_hash, model, block_id,
                    block_offset, block_len)
                 VALUES (1, ?1, ?2, 'call', 'gateway', 2, ?3, ?3 + 10, 10, 0, 0, 'llama', 1, 0, 0)",
                rusqlite::params![vec![t; 16], vec![t; 8], i64::from(t) * 100],
            )
            .unwrap();
            trace_ids.extend_from_slice(&[t; 16]);
        }
        conn.execute(
            "INSERT INTO block_traces VALUES (1, 1, 1, 3, 100, 300, ?1)",
            [trace_ids],
        )
        .unwrap();

        migrate(&mut conn, &path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        // Migration 16 recorded the block's values from its rows and listed its operations.
        let values: Vec<(i64, String)> = conn
            .prepare("SELECT field, value FROM block_values WHERE block_id = 1 ORDER BY field")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(values, [(1, "gateway".to_owned()), (2, "llama".to_owned())]);
        let operations: i64 = conn
            .query_row("SELECT count(*) FROM tenant_operations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(operations, 1);
        let page = search(
            &conn,
            &Default::default(),
            &TenantId::new("acme").unwrap(),
            &TraceQuery {
                model: Some("llama".into()),
                limit: 10,
                ..Default::default()
            },
        )
        .unwrap();
        let found: Vec<TraceId> = page.traces.iter().map(|t| t.trace_id).collect();
        assert_eq!(
            found,
            [TraceId([3; 16]), TraceId([2; 16]), TraceId([1; 16])]
        );
    }
}
