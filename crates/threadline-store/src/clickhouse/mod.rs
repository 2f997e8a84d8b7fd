//! The ClickHouse backend: spans, logs, rollups, incidents and the lineage log in a
//! ClickHouse database, for deployments that outgrow one machine. Every Threadline
//! process on the database is a stateless replica: what it keeps in memory (the retry
//! window, the hop joiner's waiting spans, the lineage graph's materialized copy) is a
//! cache that ClickHouse's tables rebuild.
//!
//! Here: opening (connect, migrate) and the `StoreBackend` operations, each handed to
//! its module — `writer` (group-committed inserts), `traces` (trace reads, search),
//! `logs`, `aggregates` (rollups, hops, incidents, marks), `graph` (the lineage log and
//! its materialized copy), `erase`. `schema` holds the DDL; `rows` the row types.

mod aggregates;
mod client;
mod erase;
mod graph;
mod lease;
mod logs;
mod rows;
mod schema;
mod search;
mod search_rows;
mod spool;
mod sql;
mod traces;
mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use threadline_analysis::hops::{Hop, HopCell};
use threadline_analysis::{Incident, IncidentId, Observed, RollupCell, SeriesKey};
use threadline_model::{
    GraphUpdate, LineageGraph, LineageNode, LogRecord, NodeId, NodeKind, SpanId, SpanKind,
    SpanRecord, TenantId, TraceId,
};

pub use client::ClickHouseConfig;
pub use spool::SpoolStats;

use crate::{
    Bound, ErasureRecord, ErasureSubject, ExemplarQuery, LogPage, LogQuery, RequestsServed,
    ServiceSummary, SkeletonSpan, SpanReader, StoreBackend, StoreError, TracePage, TraceQuery,
    WalkLimits, WriteAck, WriterStats,
};

/// Tuning of the ClickHouse backend.
#[derive(Clone, Debug)]
pub struct ClickHouseOptions {
    /// Bytes of writes queued for ClickHouse before writes are refused (429).
    pub max_queued_bytes: usize,
    pub max_queued_batches: usize,
    /// Recent spans remembered so a retried export is not rolled up twice.
    pub retry_window_spans: usize,
    /// What counts as drift between dataset versions (the lineage graph's).
    pub drift: threadline_analysis::DriftConfig,
    /// Bytes the spool may hold while ClickHouse does not take writes; past them,
    /// writes are refused (429).
    pub spool_max_bytes: u64,
}

impl Default for ClickHouseOptions {
    fn default() -> Self {
        Self {
            max_queued_bytes: 256 * 1024 * 1024,
            max_queued_batches: 4096,
            retry_window_spans: 917_504,
            drift: threadline_analysis::DriftConfig::default(),
            spool_max_bytes: 1 << 30,
        }
    }
}

/// The ClickHouse store.
pub struct ClickHouseStore {
    /// This process's hold on its local directory (the lineage copy; the spool).
    _lock: crate::dir_lock::DirLock,
    conn: Arc<client::Connection>,
    database: String,
    writer: writer::Writer,
    recent: Arc<Mutex<crate::retries::RecentSpans>>,
    hop_joiner: Mutex<threadline_analysis::hops::HopJoiner<TenantId>>,
    tenants_seen: Mutex<foldhash::HashSet<TenantId>>,
    graph: Arc<graph::Graph>,
}

impl ClickHouseStore {
    /// Connects, creates the database if needed and migrates its schema. `local_dir` is
    /// this replica's own directory (one process each, locked like the embedded
    /// store's): it holds the lineage graph's materialized copy.
    pub fn open(
        config: &ClickHouseConfig,
        options: ClickHouseOptions,
        local_dir: &std::path::Path,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(local_dir).map_err(|source| {
            StoreError::unavailable(format!("cannot create directory {}", local_dir.display()))
                .with_source(source)
        })?;
        let lock = crate::dir_lock::DirLock::acquire(local_dir)?;
        let conn = Arc::new(client::Connection::open(config)?);
        let version = schema::migrate(&conn, &config.database)?;
        tracing::info!(
            url = %config.url,
            database = %config.database,
            server = %format!("{}.{}", conn.version.major, conn.version.minor),
            schema = version,
            "ClickHouse store open"
        );
        let recent = Arc::new(Mutex::new(crate::retries::RecentSpans::new(
            options.retry_window_spans,
        )));
        let spool = Arc::new(spool::Spool::open(
            &local_dir.join("spool"),
            options.spool_max_bytes,
        )?);
        let writer = writer::Writer::start(
            &conn.handle(),
            conn.client.clone(),
            Arc::clone(&recent),
            spool,
            options.max_queued_bytes,
            options.max_queued_batches,
        );
        let graph = Arc::new(graph::Graph::open(
            Arc::clone(&conn),
            local_dir.join("lineage"),
            options.drift.clone(),
        )?);
        Ok(Self {
            _lock: lock,
            conn,
            database: config.database.clone(),
            writer,
            recent,
            hop_joiner: Mutex::new(Default::default()),
            tenants_seen: Mutex::new(Default::default()),
            graph,
        })
    }

    /// The database this store lives in.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The tenant's row for `tenants`, the first time this process writes for it.
    fn tenant_row(&self, tenant: &TenantId) -> Vec<rows::TenantRow> {
        let new = self
            .tenants_seen
            .lock()
            .map_or(true, |mut seen| seen.insert(tenant.clone()));
        if new {
            vec![rows::TenantRow {
                tenant: tenant.as_str().to_owned(),
            }]
        } else {
            Vec::new()
        }
    }
}

/// The schema statements `ClickHouseStore::open` runs on a server of `server_version`
/// (`"18.16.1"`, `"26.9"`) for `database`, in order: for review, or for a DBA who
/// creates the schema by hand.
pub fn clickhouse_ddl(database: &str, server_version: &str) -> Result<Vec<String>, StoreError> {
    let version = client::ServerVersion::parse(server_version).ok_or_else(|| {
        StoreError::invalid_query(format!("{server_version:?} is not a ClickHouse version"))
    })?;
    Ok(
        schema::statements_after(database, schema::Dialect::of(version), 0)
            .into_iter()
            .map(|(_, s)| s)
            .collect(),
    )
}

/// Unix nanoseconds now.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A number that grows with every call in this process and with time across processes
/// (nanoseconds, bumped past the last one handed out): row versions and log sequence
/// numbers. The low 8 bits name this process, so two replicas never hand out the same
/// number in the same nanosecond window.
pub(crate) fn next_stamp() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    static REPLICA: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let replica = *REPLICA.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = foldhash::fast::RandomState::default().build_hasher();
        h.write_u64(now_ns());
        h.write_u32(std::process::id());
        h.finish() & 0xff
    });
    let now = now_ns() >> 8;
    let mut last = LAST.load(Ordering::SeqCst);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange(last, next, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return (next << 8) | replica,
            Err(seen) => last = seen,
        }
    }
}

/// The version of rows whose first copy wins (spans, search rows, log records): the
/// highest for the earliest write. Coarse — copies written within `2^27` ns (≈ 134 ms,
/// one export and its immediate retry) tie, ClickHouse then keeps either — so that
/// the rows of a granule share a few versions: ≈ 0.3 rather than 2–3 bytes a span.
fn first_copy_version() -> u64 {
    u64::MAX - (next_stamp() >> 27)
}

impl StoreBackend for ClickHouseStore {
    fn write_spans(
        &self,
        tenant: &TenantId,
        spans: &[SpanRecord],
        observed: &mut Vec<Observed>,
        bindings: GraphUpdate,
    ) -> Result<WriteAck, StoreError> {
        let (repeated, marked) = self
            .recent
            .lock()
            .map_err(|_| StoreError::poisoned("recent spans"))?
            .mark_batch(tenant, spans.iter().map(|s| (s.trace_id, s.span_id)));
        observed.retain(|o| !repeated[o.span]);
        let hops = self
            .hop_joiner
            .lock()
            .map_err(|_| StoreError::poisoned("hop joiner"))?
            .hops(tenant, spans, &repeated, now_ns() as i64);
        let prepared = (|| {
            let mut rows = writer::Rows::default();
            let version = first_copy_version();
            let name = tenant.as_str();
            let mut bytes = 0;
            for span in spans {
                let row = rows::SpanRow::of(name, span, version)?;
                bytes += row.detail.len() + row.origin.len() + 256;
                rows.spans.push(row);
                rows.search
                    .push(search_rows::SearchRow::of(name, span, version));
            }
            rows.operations = rows::OperationRow::of_spans(name, spans);
            rows.tenants = self.tenant_row(tenant);
            let rollups = threadline_analysis::Rollups::of_observed(spans, observed);
            if !rollups.is_empty() {
                rows.rollups.insert(name.to_owned(), rollups);
            }
            if !hops.is_empty() {
                rows.hops.insert(name.to_owned(), hops);
            }
            Ok::<_, StoreError>((rows, bytes))
        })();
        let submitted =
            prepared.and_then(|(rows, bytes)| self.writer.submit(rows, bytes, marked.clone()));
        let ack = match submitted {
            Ok(ack) => ack,
            Err(e) => {
                if let Ok(mut recent) = self.recent.lock() {
                    recent.forget(&marked);
                }
                return Err(e);
            }
        };
        if bindings != GraphUpdate::default() {
            // The spans are safe whatever happens here: bindings come again with the
            // next request, and one not logged now is logged then.
            if let Err(e) = self.graph.note_bindings(tenant, bindings) {
                tracing::warn!(error = %e, "span bindings not logged this time");
            }
        }
        Ok(ack)
    }

    fn write_logs(&self, tenant: &TenantId, records: &[LogRecord]) -> Result<WriteAck, StoreError> {
        let mut rows = writer::Rows::default();
        let version = first_copy_version();
        let mut bytes = 0;
        for record in records {
            let row = rows::LogRow::of(tenant.as_str(), record, next_stamp() as i64, version)?;
            bytes += row.detail.len() + row.origin.len() + 128;
            rows.logs.push(row);
        }
        rows.tenants = self.tenant_row(tenant);
        self.writer.submit(rows, bytes, Vec::new())
    }

    fn write_graph(
        &self,
        tenant: &TenantId,
        update: GraphUpdate,
        received_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        self.graph.write(tenant, update, received_ns)
    }

    fn erase(
        &self,
        tenant: &TenantId,
        subject: ErasureSubject,
        requested_by: &str,
        requested_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        erase::submit(self, tenant, subject, requested_by, requested_ns)
    }

    fn save_incidents(
        &self,
        tenant: &TenantId,
        incidents: Vec<Incident>,
        processed_minute: i64,
    ) -> Result<WriteAck, StoreError> {
        let mut rows = writer::Rows::default();
        let version = next_stamp();
        for incident in &incidents {
            rows.incidents
                .push(aggregates::incident_row(tenant, incident, version)?);
        }
        rows.marks.push(rows::MarkRow {
            tenant: tenant.as_str().to_owned(),
            minute: processed_minute,
            version,
        });
        rows.tenants = self.tenant_row(tenant);
        self.writer
            .submit(rows, 1024 * (incidents.len() + 1), Vec::new())
    }

    fn get_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SpanRecord>, StoreError> {
        traces::get_trace(&self.conn, tenant, trace_id)
    }

    fn trace_skeleton(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SkeletonSpan>, StoreError> {
        traces::skeleton(&self.conn, tenant, trace_id)
    }

    fn open_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Option<(Vec<SkeletonSpan>, SpanReader)>, StoreError> {
        traces::open_trace(&self.conn, tenant, trace_id)
    }

    fn get_span(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: SpanId,
    ) -> Result<Option<SpanRecord>, StoreError> {
        traces::get_span(&self.conn, tenant, trace_id, span_id)
    }

    fn search(&self, tenant: &TenantId, query: &TraceQuery) -> Result<TracePage, StoreError> {
        if let Some(problem) = query.problem() {
            return Err(StoreError::invalid_query(problem));
        }
        search::run(&self.conn, tenant, query)
    }

    fn recent_sessions(
        &self,
        tenant: &TenantId,
        range: (Option<u64>, Option<u64>),
        user: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        traces::recent_sessions(&self.conn, tenant, range, user, limit)
    }

    fn services(&self, tenant: &TenantId) -> Result<Vec<ServiceSummary>, StoreError> {
        traces::services(&self.conn, tenant)
    }

    fn operations(
        &self,
        tenant: &TenantId,
        service: Option<&str>,
    ) -> Result<Vec<(String, String, SpanKind)>, StoreError> {
        traces::operations(&self.conn, tenant, service)
    }

    fn exemplars(
        &self,
        tenant: &TenantId,
        query: &ExemplarQuery,
    ) -> Result<Vec<(TraceId, u64)>, StoreError> {
        traces::exemplars(&self.conn, tenant, query)
    }

    fn requests_served(
        &self,
        tenant: &TenantId,
        adapters: &[String],
        instances: &[String],
        since_ns: i64,
    ) -> Result<RequestsServed, StoreError> {
        traces::requests_served(&self.conn, tenant, adapters, instances, since_ns)
    }

    fn logs_of(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: Option<SpanId>,
    ) -> Result<Vec<LogRecord>, StoreError> {
        logs::logs_of(&self.conn, tenant, trace_id, span_id)
    }

    fn search_logs(&self, tenant: &TenantId, query: &LogQuery) -> Result<LogPage, StoreError> {
        logs::search(&self.conn, tenant, query)
    }

    fn resolve_node(&self, tenant: &TenantId, name: &str) -> Result<Vec<NodeId>, StoreError> {
        self.graph.read()?.resolve_node(tenant, name)
    }

    fn get_node(&self, tenant: &TenantId, id: &NodeId) -> Result<Option<LineageNode>, StoreError> {
        self.graph.read()?.get_node(tenant, id)
    }

    fn find_nodes(
        &self,
        tenant: &TenantId,
        kind: Option<NodeKind>,
        contains: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LineageNode>, StoreError> {
        self.graph.read()?.find_nodes(tenant, kind, contains, limit)
    }

    fn node_counts(&self, tenant: &TenantId) -> Result<Vec<(NodeKind, u64)>, StoreError> {
        self.graph.read()?.node_counts(tenant)
    }

    fn runs_for_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<NodeId>, StoreError> {
        self.graph.read()?.runs_for_trace(tenant, trace_id)
    }

    fn graph_dump(
        &self,
        tenant: &TenantId,
        max_nodes: usize,
    ) -> Result<Option<LineageGraph>, StoreError> {
        self.graph.read()?.graph_dump(tenant, max_nodes)
    }

    fn walk(
        &self,
        tenant: &TenantId,
        start: &NodeId,
        limits: &WalkLimits,
    ) -> Result<Option<LineageGraph>, StoreError> {
        self.graph.read()?.walk(tenant, start, limits)
    }

    fn bound_instances(&self, tenant: &TenantId) -> Result<Vec<Bound>, StoreError> {
        self.graph.read()?.bound_instances(tenant)
    }

    fn rollup_cells(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<(i64, SeriesKey, RollupCell)>, StoreError> {
        aggregates::rollup_cells(&self.conn, tenant, from_minute, to_minute)
    }

    fn rollup_minute_range(&self, tenant: &TenantId) -> Result<Option<(i64, i64)>, StoreError> {
        aggregates::rollup_minute_range(&self.conn, tenant)
    }

    fn service_hops(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<(Hop, HopCell)>, StoreError> {
        aggregates::service_hops(&self.conn, tenant, from_minute, to_minute)
    }

    fn incidents(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<Incident>, StoreError> {
        aggregates::incidents(&self.conn, tenant, from_minute, to_minute)
    }

    fn incident(&self, tenant: &TenantId, id: &IncidentId) -> Result<Option<Incident>, StoreError> {
        aggregates::incident(&self.conn, tenant, id)
    }

    fn detector_mark(&self, tenant: &TenantId) -> Result<Option<i64>, StoreError> {
        aggregates::detector_mark(&self.conn, tenant)
    }

    fn tenants(&self) -> Result<Vec<TenantId>, StoreError> {
        aggregates::tenants(&self.conn)
    }

    fn erasures(&self, tenant: &TenantId) -> Result<Vec<ErasureRecord>, StoreError> {
        erase::audit_log(&self.conn, tenant)
    }

    fn ping(&self) -> Result<(), StoreError> {
        let client = self.conn.client.clone();
        self.conn
            .run(async move { client.query("SELECT 1").fetch_one::<u8>().await })
            .map(drop)
    }

    fn writer_stats(&self) -> WriterStats {
        self.writer.stats()
    }

    fn index_backlog(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    fn hold_lease(&self, name: &str, holder: &str, ttl_ns: i64) -> Result<bool, StoreError> {
        lease::hold(&self.conn, name, holder, ttl_ns)
    }
}
