//! The embedded backend: one SQLite database in WAL mode, written by a single
//! group-commit writer thread and read through a small connection pool. Nothing
//! outside this module names SQLite; callers reach it through `crate::Store`.

mod attr_filter;
mod background;
mod block_values;
mod bloom;
mod checkpoint;
mod codec;
mod distinct;
mod erase;
mod erase_copies;
mod graph;
mod hops;
mod incidents;
mod logs;
mod newest_first;
mod query;
mod rollups;
mod schema;
mod search;
mod sessions;
mod skeleton;
mod span_screen;
mod text_groups;
pub(crate) mod text_index;
mod text_indexer;
mod trace_compactor;
mod trace_index;
mod trace_lookup;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use crate::{StoreBackend, StoreError};
use threadline_model::{
    GraphUpdate, LineageGraph, LineageNode, NodeId, NodeKind, SpanRecord, TenantId, TraceId,
};

pub(crate) use crate::ack::{WriteAck, WriterStats};
pub(crate) use crate::erasure::{ErasureRecord, ErasureSubject, ERASED};
pub(crate) use crate::log_search::{LogPage, LogQuery};
pub(crate) use crate::queries::WalkLimits;
pub(crate) use crate::queries::{RequestsServed, ServiceSummary};
pub(crate) use crate::search::{TracePage, TraceQuery};
pub(crate) use crate::skeleton::SkeletonSpan;
pub(crate) use crate::{ExemplarQuery, SpanReader};
pub(crate) use graph::PreparedGraph;
pub(crate) use logs::PreparedLogs;
pub use text_indexer::TextIndexConfig;
pub use trace_compactor::TraceIndexConfig;
pub(crate) use writer::PreparedBatch;

/// The database file inside the data directory.
pub const DB_FILE_NAME: &str = "threadline.db";

/// Tuning of the embedded store.
#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    /// Batches waiting for the writer before new writes are refused (back-pressure).
    pub max_queued_batches: usize,
    /// Encoded bytes waiting for the writer before new writes are refused.
    pub max_queued_bytes: usize,
    /// Most spans committed in one transaction.
    pub max_spans_per_commit: usize,
    /// How long a commit waits at most for span batches still being prepared on the
    /// ingest pool (group commit under load; with none in preparation it does not).
    pub group_commit_wait: std::time::Duration,
    /// Encoded bytes committed after which the writer lets the WAL start over (see
    /// `checkpoint`); the WAL holds a few times this, counting index pages.
    pub wal_restart_bytes: usize,
    /// What counts as drift between dataset versions.
    pub drift: threadline_analysis::DriftConfig,
    /// Shape of the trace-id index.
    pub trace_index: TraceIndexConfig,
    /// When the full-text indexer takes the newest blocks.
    pub text_index: TextIndexConfig,
    /// The most recent spans whose identities are remembered, so that a retried
    /// export's requests are not rolled up twice (`retries`: at least the newest half
    /// of them).
    pub retry_window_spans: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            max_queued_batches: 1024,
            max_queued_bytes: 256 * 1024 * 1024,
            max_spans_per_commit: 20_000,
            group_commit_wait: std::time::Duration::from_millis(2),
            wal_restart_bytes: 4 * 1024 * 1024,
            drift: threadline_analysis::DriftConfig::default(),
            trace_index: TraceIndexConfig::default(),
            text_index: TextIndexConfig::default(),
            retry_window_spans: 917_504,
        }
    }
}

/// The embedded store: cheap to clone, shared by every request handler.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// This process's hold on the data directory.
    _lock: crate::dir_lock::DirLock,
    writer: writer::WriterHandle,
    readers: Mutex<Vec<Connection>>,
    /// The trace-id runs' filters the readers have read.
    run_filters: trace_index::RunFilters,
    /// Identities of the most recent spans, prepared or stored.
    recent: Mutex<crate::retries::RecentSpans>,
    /// Spans waiting for the other end of a service hop sent in another request.
    hop_joiner: Mutex<threadline_analysis::hops::HopJoiner<TenantId>>,
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the store under `data_dir`.
    pub fn open(data_dir: &Path, config: EmbeddedConfig) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| {
            StoreError::unavailable(format!(
                "cannot create data directory {}",
                data_dir.display()
            ))
            .with_source(source)
        })?;
        let lock = crate::dir_lock::DirLock::acquire(data_dir)?;
        let path = data_dir.join(DB_FILE_NAME);
        let mut conn = schema::open_connection(&path)?;
        schema::migrate(&mut conn, &path)?;
        let replayed = rollups::replay(&mut conn)?;
        let recent = rollups::recent_spans(&conn, config.retry_window_spans)?;
        if replayed > 0 {
            tracing::info!(
                blocks = replayed,
                "rolled up blocks committed after the last rollup flush"
            );
        }
        // The writer thread owns the checkpointer's handle: it stops after the writer.
        let checkpoints = checkpoint::spawn_checkpointer(&path)?;
        let index_config = config.trace_index;
        let text_config = config.text_index;
        let (text_feed, text_offered) = text_indexer::feed();
        let writer =
            writer::WriterHandle::spawn(conn, path.clone(), config, checkpoints, text_feed)?;
        let inner = Arc::new(Inner {
            path,
            _lock: lock,
            writer,
            readers: Mutex::new(Vec::new()),
            run_filters: Default::default(),
            recent: Mutex::new(recent),
            hop_joiner: Mutex::new(Default::default()),
        });
        trace_compactor::spawn(
            schema::open_background_reader(&inner.path)?,
            Arc::downgrade(&inner),
            index_config,
        )?;
        text_indexer::spawn(
            schema::open_background_reader(&inner.path)?,
            Arc::downgrade(&inner),
            text_config,
            text_offered,
        )?;
        Ok(Self { inner })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Bytes committed but not yet copied into the database file by the background
    /// checkpointer (the write-ahead log's size): a bulk load has settled when this
    /// is small again.
    pub fn uncheckpointed_bytes(&self) -> u64 {
        std::fs::metadata(self.inner.path.with_extension("db-wal")).map_or(0, |m| m.len())
    }

    /// Encodes spans for the writer. CPU-bound: call it off the async runtime.
    /// `observed` are the requests and model calls among the spans, as
    /// `threadline_analysis::observe` finds them: they are rolled up in the same
    /// commit, but for those whose span a recent batch already had (a retried export:
    /// the spans are stored again, readers show the first copy), which are removed
    /// from `observed` so the caller's own counts leave them out too.
    pub(crate) fn prepare(
        &self,
        tenant: &TenantId,
        spans: &[SpanRecord],
        observed: &mut Vec<threadline_analysis::Observed>,
    ) -> Result<PreparedBatch, StoreError> {
        let (repeated, marked) = self
            .inner
            .recent
            .lock()
            .map_err(|_| StoreError::poisoned("recent spans"))?
            .mark_batch(tenant, spans.iter().map(|s| (s.trace_id, s.span_id)));
        observed.retain(|o| !repeated[o.span]);
        let mut batch = writer::PreparedBatch::encode(tenant, spans, observed)?;
        batch.marked = marked;
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        batch.hops = self
            .inner
            .hop_joiner
            .lock()
            .map_err(|_| StoreError::poisoned("hop joiner"))?
            .hops(tenant, spans, &repeated, now_ns);
        Ok(batch)
    }

    /// Queues a batch; the returned ack resolves once the batch is committed (durable).
    /// Refuses with `QueueFull` instead of buffering without bound (the batch's spans
    /// then count as new when they are sent again).
    pub(crate) fn submit(&self, batch: PreparedBatch) -> Result<WriteAck, StoreError> {
        let marked = batch.marked.clone();
        self.inner.writer.submit(batch).inspect_err(|_| {
            if let Ok(mut recent) = self.inner.recent.lock() {
                recent.forget(&marked);
            }
        })
    }

    /// Encodes log records for the writer (CPU-bound: call it off the async runtime).
    pub(crate) fn prepare_logs(
        &self,
        tenant: &TenantId,
        records: &[threadline_model::LogRecord],
    ) -> Result<PreparedLogs, StoreError> {
        PreparedLogs::encode(tenant, records)
    }

    /// Queues log records; the ack resolves once they are committed (durable).
    pub(crate) fn submit_logs(&self, logs: PreparedLogs) -> Result<WriteAck, StoreError> {
        self.inner.writer.submit_logs(logs)
    }

    /// `submit_graph` for a change already prepared.
    pub(crate) fn submit_prepared_graph(
        &self,
        tenant: &TenantId,
        graph: PreparedGraph,
        received_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        self.inner.writer.submit_graph(writer::GraphJob {
            tenant: tenant.clone(),
            graph,
            received_ns,
        })
    }

    /// Asks the writer to merge the rollup cells it holds into the store; the ack
    /// resolves once they are committed, so reads after it see every acked span.
    pub fn flush_rollups(&self) -> Result<WriteAck, StoreError> {
        self.inner.writer.submit_rollup_flush()
    }

    /// Read-your-writes for rollups and hops: merges the cells the writer holds
    /// before a read, waiting for room in the queue rather than failing under load.
    fn settle_rollups(&self) -> Result<(), StoreError> {
        self.inner.writer.flush_rollups_waiting()
    }

    fn with_reader<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = self.take_reader()?;
        let result = f(&conn);
        self.inner.return_reader(conn);
        result
    }

    fn take_reader(&self) -> Result<Connection, StoreError> {
        let pooled = self
            .inner
            .readers
            .lock()
            .ok()
            .and_then(|mut pool| pool.pop());
        match pooled {
            Some(c) => Ok(c),
            None => schema::open_reader(&self.inner.path),
        }
    }
}

impl StoreBackend for SqliteStore {
    fn write_spans(
        &self,
        tenant: &TenantId,
        spans: &[SpanRecord],
        observed: &mut Vec<threadline_analysis::Observed>,
        bindings: GraphUpdate,
    ) -> Result<WriteAck, StoreError> {
        let preparing = self.inner.writer.preparing();
        let mut batch = self.prepare(tenant, spans, observed)?;
        batch.attach_graph(bindings);
        // Counted out before it is queued: a writer that then finds nothing queued and
        // nothing in preparation commits at once.
        drop(preparing);
        self.submit(batch)
    }

    fn write_logs(
        &self,
        tenant: &TenantId,
        records: &[threadline_model::LogRecord],
    ) -> Result<WriteAck, StoreError> {
        let preparing = self.inner.writer.preparing();
        let logs = self.prepare_logs(tenant, records)?;
        drop(preparing);
        self.submit_logs(logs)
    }

    fn write_coming(&self) -> crate::WriteComing {
        self.inner.writer.preparing()
    }

    fn write_graph(
        &self,
        tenant: &TenantId,
        update: GraphUpdate,
        received_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        self.submit_prepared_graph(tenant, PreparedGraph::new(update), received_ns)
    }

    /// Resolves once committed and the WAL is truncated (no erased byte left in it).
    fn erase(
        &self,
        tenant: &TenantId,
        subject: ErasureSubject,
        requested_by: &str,
        requested_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        self.inner.writer.submit_erase(writer::EraseJob {
            tenant: tenant.clone(),
            subject,
            requested_by: requested_by.to_owned(),
            requested_ns,
        })
    }

    /// The logs of a trace, or of one of its spans, oldest first.
    fn logs_of(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: Option<threadline_model::SpanId>,
    ) -> Result<Vec<threadline_model::LogRecord>, StoreError> {
        self.with_reader(|conn| logs::logs_of(conn, tenant, trace_id, span_id))
    }

    /// Log records newest first, filtered, a page at a time.
    fn search_logs(&self, tenant: &TenantId, query: &LogQuery) -> Result<LogPage, StoreError> {
        self.with_reader(|conn| logs::search(conn, tenant, query))
    }

    /// The tenant's erasure audit log, newest first.
    fn erasures(&self, tenant: &TenantId) -> Result<Vec<ErasureRecord>, StoreError> {
        self.with_reader(|conn| {
            erase::audit_log(conn, tenant.as_str()).map_err(|e| sqlite_err(conn, e))
        })
    }

    /// Distinct traces that went through the given adapters / instances since a time.
    fn requests_served(
        &self,
        tenant: &TenantId,
        adapters: &[String],
        instances: &[String],
        since_ns: i64,
    ) -> Result<RequestsServed, StoreError> {
        self.with_reader(|conn| query::requests_served(conn, tenant, adapters, instances, since_ns))
    }

    /// The node ids `name` may mean: a `kind:key` that exists, else every node whose
    /// key or bare name (last `:`-segment) is `name`.
    fn resolve_node(&self, tenant: &TenantId, name: &str) -> Result<Vec<NodeId>, StoreError> {
        self.with_reader(|conn| graph::resolve(conn, tenant, name))
    }

    fn get_node(&self, tenant: &TenantId, id: &NodeId) -> Result<Option<LineageNode>, StoreError> {
        self.with_reader(|conn| graph::get_node(conn, tenant, id))
    }

    /// Nodes of `kind` (any kind: `None`) whose key contains `contains` (any case),
    /// most recently seen first.
    fn find_nodes(
        &self,
        tenant: &TenantId,
        kind: Option<NodeKind>,
        contains: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LineageNode>, StoreError> {
        self.with_reader(|conn| graph::find_nodes(conn, tenant, kind, contains, limit))
    }

    /// Calls between services (hops) in `from_minute..=to_minute`, merged per hop.
    fn service_hops(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<
        Vec<(
            threadline_analysis::hops::Hop,
            threadline_analysis::hops::HopCell,
        )>,
        StoreError,
    > {
        self.settle_rollups()?;
        self.with_reader(|conn| hops::between(conn, tenant, from_minute, to_minute))
    }

    /// How many lineage nodes of each kind the tenant has.
    fn node_counts(&self, tenant: &TenantId) -> Result<Vec<(NodeKind, u64)>, StoreError> {
        self.with_reader(|conn| graph::node_counts(conn, tenant))
    }

    /// Runs whose OpenLineage events carried this trace id (parent facet `traceId`).
    fn runs_for_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<NodeId>, StoreError> {
        self.with_reader(|conn| graph::runs_for_trace(conn, tenant, &trace_id.to_string()))
    }

    /// The tenant's whole graph, or `None` when it has more than `max_nodes` nodes.
    fn graph_dump(
        &self,
        tenant: &TenantId,
        max_nodes: usize,
    ) -> Result<Option<LineageGraph>, StoreError> {
        self.with_reader(|conn| graph::dump(conn, tenant, max_nodes))
    }

    /// The subgraph reached from `start`; `None` when the tenant has no such node.
    fn walk(
        &self,
        tenant: &TenantId,
        start: &NodeId,
        limits: &WalkLimits,
    ) -> Result<Option<LineageGraph>, StoreError> {
        self.with_reader(|conn| graph::walk(conn, tenant, start, limits))
    }

    /// The tenant's rollup cells with minutes (unix minutes of span start time) in
    /// `from_minute..=to_minute`. Call `flush_rollups` first to include the last second.
    fn rollup_cells(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<
        Vec<(
            i64,
            threadline_analysis::SeriesKey,
            threadline_analysis::RollupCell,
        )>,
        StoreError,
    > {
        self.settle_rollups()?;
        self.with_reader(|conn| match query::tenant_key(conn, tenant)? {
            Some(tenant_id) => rollups::cells_between(conn, tenant_id, from_minute, to_minute),
            None => Ok(Vec::new()),
        })
    }

    fn bound_instances(&self, tenant: &TenantId) -> Result<Vec<crate::Bound>, StoreError> {
        const WINDOW_NS: i64 = 15 * 60 * 1_000_000_000;
        self.with_reader(|conn| match query::tenant_key(conn, tenant)? {
            Some(tenant_id) => graph::bound_instances(conn, tenant_id, WINDOW_NS),
            None => Ok(Vec::new()),
        })
    }

    /// The first and last minute holding rollup cells for the tenant.
    fn rollup_minute_range(&self, tenant: &TenantId) -> Result<Option<(i64, i64)>, StoreError> {
        self.settle_rollups()?;
        self.with_reader(|conn| {
            let Some(tenant_id) = query::tenant_key(conn, tenant)? else {
                return Ok(None);
            };
            // Two scalar subqueries: each is one seek at an end of the key range, where
            // min() and max() in one SELECT would scan all of the tenant's cells.
            conn.query_row(
                "SELECT (SELECT min(minute) FROM rollups WHERE tenant_id = ?1),
                        (SELECT max(minute) FROM rollups WHERE tenant_id = ?1)",
                [tenant_id],
                |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
            )
            .map_err(|e| sqlite_err(conn, e))
        })
    }

    /// Every tenant that has written anything.
    fn tenants(&self) -> Result<Vec<TenantId>, StoreError> {
        self.with_reader(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT name FROM tenants ORDER BY id")
                .map_err(|e| sqlite_err(conn, e))?;
            let names: Vec<String> = stmt
                .query_map([], |r| r.get(0))
                .and_then(|rows| rows.collect())
                .map_err(|e| sqlite_err(conn, e))?;
            names
                .iter()
                .map(|n| {
                    TenantId::new(n).map_err(|e| StoreError::corrupt(format!("tenant {n:?}: {e}")))
                })
                .collect()
        })
    }

    /// Stores incidents (new or updated) and the detector's progress in one commit.
    fn save_incidents(
        &self,
        tenant: &TenantId,
        incidents: Vec<threadline_analysis::Incident>,
        processed_minute: i64,
    ) -> Result<WriteAck, StoreError> {
        self.inner.writer.submit_incidents(writer::IncidentsJob {
            tenant: tenant.clone(),
            incidents,
            processed_minute,
        })
    }

    /// Incidents with onsets in `from_minute..=to_minute`, earliest first.
    fn incidents(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<threadline_analysis::Incident>, StoreError> {
        self.with_reader(|conn| match query::tenant_key(conn, tenant)? {
            Some(tenant_id) => incidents::between(conn, tenant_id, from_minute, to_minute),
            None => Ok(Vec::new()),
        })
    }

    fn incident(
        &self,
        tenant: &TenantId,
        id: &threadline_analysis::IncidentId,
    ) -> Result<Option<threadline_analysis::Incident>, StoreError> {
        self.with_reader(|conn| match query::tenant_key(conn, tenant)? {
            Some(tenant_id) => incidents::get(conn, tenant_id, id.as_str()),
            None => Ok(None),
        })
    }

    /// The last minute the incident detector has processed for the tenant.
    fn detector_mark(&self, tenant: &TenantId) -> Result<Option<i64>, StoreError> {
        self.with_reader(|conn| match query::tenant_key(conn, tenant)? {
            Some(tenant_id) => incidents::processed_minute(conn, tenant_id),
            None => Ok(None),
        })
    }

    /// The slowest (or failed) spans matching column values in a window: examples
    /// for a diagnosis.
    fn exemplars(
        &self,
        tenant: &TenantId,
        query: &ExemplarQuery,
    ) -> Result<Vec<(TraceId, u64)>, StoreError> {
        self.with_reader(|conn| query::exemplars(conn, tenant, query))
    }

    fn writer_stats(&self) -> WriterStats {
        self.inner.writer.stats()
    }

    /// Every span of one trace, in start order. Empty when the tenant has no such trace.
    fn get_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SpanRecord>, StoreError> {
        self.with_reader(|conn| query::get_trace(conn, &self.inner.run_filters, tenant, trace_id))
    }

    /// Every span of one trace as a skeleton (no detail opened), in start order.
    fn trace_skeleton(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SkeletonSpan>, StoreError> {
        self.with_reader(|conn| {
            skeleton::trace_skeleton(conn, &self.inner.run_filters, tenant, trace_id)
        })
    }

    /// A trace opened for a walk of any size: its skeleton (spans in start order, as
    /// `trace_skeleton` gives them) and a reader that opens those spans whole, one at a
    /// time. `None` when the tenant has no such trace.
    fn open_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Option<(Vec<SkeletonSpan>, SpanReader)>, StoreError> {
        let conn = self.take_reader()?;
        let opened = query::tenant_key(&conn, tenant).and_then(|key| match key {
            Some(tenant_id) => {
                skeleton::trace_skeleton(&conn, &self.inner.run_filters, tenant, trace_id)
                    .map(|s| Some((tenant_id, s)))
            }
            None => Ok(None),
        });
        match opened {
            Ok(Some((tenant_id, spans))) if !spans.is_empty() => Ok(Some((
                spans,
                SpanReader::new(skeleton::SqliteSpans::new(
                    conn,
                    Arc::downgrade(&self.inner),
                    tenant_id,
                    trace_id,
                )),
            ))),
            other => {
                self.inner.return_reader(conn);
                other.map(|_| None)
            }
        }
    }

    /// One span of a trace, whole, or `None`.
    fn get_span(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: threadline_model::SpanId,
    ) -> Result<Option<SpanRecord>, StoreError> {
        self.with_reader(|conn| {
            skeleton::get_span(conn, &self.inner.run_filters, tenant, trace_id, span_id)
        })
    }

    /// Trace summaries matching `query`, newest first, one page at a time.
    fn search(&self, tenant: &TenantId, query: &TraceQuery) -> Result<TracePage, StoreError> {
        if let Some(problem) = query.problem() {
            return Err(StoreError::invalid_query(problem));
        }
        self.with_reader(|conn| search::search(conn, &self.inner.run_filters, tenant, query))
    }

    /// Up to `limit` session ids of the tenant with spans starting in `from..=to`,
    /// newest block first (blocks come in arrival order); with `user`, that user's
    /// sessions.
    fn recent_sessions(
        &self,
        tenant: &TenantId,
        (from, to): (Option<u64>, Option<u64>),
        user: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.with_reader(|conn| sessions::recent(conn, tenant, (from, to), user, limit))
    }

    fn services(&self, tenant: &TenantId) -> Result<Vec<ServiceSummary>, StoreError> {
        self.with_reader(|conn| query::services(conn, tenant))
    }

    /// Distinct (service, span name, kind), of one service or all, sorted.
    fn operations(
        &self,
        tenant: &TenantId,
        service: Option<&str>,
    ) -> Result<Vec<(String, String, threadline_model::SpanKind)>, StoreError> {
        self.with_reader(|conn| query::operations(conn, tenant, service))
    }

    /// Checks the database answers (used by the health endpoint).
    fn ping(&self) -> Result<(), StoreError> {
        self.with_reader(|conn| {
            conn.query_row("SELECT 1", [], |_| Ok(()))
                .map_err(|e| sqlite_err(conn, e))
        })
    }

    /// Span blocks the full-text indexer has not reached yet (searches read them span
    /// by span).
    fn index_backlog(&self) -> Result<u64, StoreError> {
        self.with_reader(|conn| {
            let state = text_groups::IndexState::read(conn)?;
            let backlog: i64 = conn
                .query_row(
                    "SELECT count(*) FROM span_blocks WHERE id >= ?1",
                    [state.indexed_end],
                    |r| r.get(0),
                )
                .map_err(|e| sqlite_err(conn, e))?;
            Ok(backlog as u64)
        })
    }

    fn as_sqlite(&self) -> Option<&SqliteStore> {
        Some(self)
    }
}

impl Inner {
    /// Puts a reader connection back in the pool (which keeps at most 8).
    fn return_reader(&self, conn: Connection) {
        if let Ok(mut pool) = self.readers.lock() {
            if pool.len() < 8 {
                pool.push(conn);
            }
        }
    }
}

impl text_indexer::TextSink for Inner {
    fn write_text(&self, write: text_indexer::TextWrite) -> Result<bool, StoreError> {
        self.writer.write_text(write)
    }
}

impl trace_compactor::IndexSink for Inner {
    fn write(&self, writes: Vec<trace_index::IndexWrite>) -> Result<(), StoreError> {
        self.writer.write_index(writes)
    }
}

/// `n` SQL parameter placeholders for an `IN (…)` list: `?,?,?`.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(",")
}

pub(crate) fn sqlite_err(conn: &Connection, source: rusqlite::Error) -> StoreError {
    sqlite_error(Path::new(conn.path().unwrap_or_default()), source)
}

/// Sorts a SQLite error into the store's kinds: a locked database is `Busy`, a damaged
/// file `Corrupt`, a failed disk or file `Unavailable`; anything else is a statement
/// this backend got wrong, reported as `Corrupt` with the statement's message.
pub(crate) fn sqlite_error(path: &Path, source: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as Code;
    let kind = match source.sqlite_error_code() {
        Some(Code::DatabaseBusy | Code::DatabaseLocked) => crate::ErrorKind::Busy,
        Some(
            Code::SystemIoFailure
            | Code::CannotOpen
            | Code::DiskFull
            | Code::PermissionDenied
            | Code::ReadOnly
            | Code::OutOfMemory,
        ) => crate::ErrorKind::Unavailable,
        _ => crate::ErrorKind::Corrupt,
    };
    StoreError::new(kind, format!("sqlite error on {}", path.display())).with_source(source)
}

#[cfg(test)]
mod block_values_tests;
#[cfg(test)]
mod filter_tests;
#[cfg(test)]
mod log_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod text_tests;
#[cfg(test)]
mod trace_index_tests;
#[cfg(test)]
mod trace_search_tests;
