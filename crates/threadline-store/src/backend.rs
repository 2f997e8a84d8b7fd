//! The storage seam: what every backend answers (`StoreBackend`), and the handle the
//! rest of the workspace holds (`Store`).
//!
//! Why a trait object and not an enum over backends: the trait *is* the contract —
//! one place lists every operation with what it promises, and the contract tests
//! (`tests/contract.rs`) run against each `Store` they can open. A backend is added
//! by implementing the trait, not by adding an arm to forty forwarding methods. A call
//! through the vtable costs nanoseconds against the milliseconds of a query or a
//! commit; the one price is that methods take and return owned, concrete types (no
//! generics, no borrowed iterators), which the surface wants anyway.
//!
//! Read-your-writes is part of the contract: once a write's `WriteAck` resolves, every
//! read of every method sees it — rollups, service hops and incidents included. No
//! caller flushes anything.

use std::sync::Arc;

use threadline_analysis::hops::{Hop, HopCell};
use threadline_analysis::{Dimension, Incident, IncidentId, Observed, RollupCell, SeriesKey};
use threadline_model::{
    GraphUpdate, LineageGraph, LineageNode, LogRecord, NodeId, NodeKind, SpanId, SpanKind,
    SpanRecord, TenantId, TraceId,
};

use crate::{
    ErasureRecord, ErasureSubject, LogPage, LogQuery, RequestsServed, ServiceSummary, SkeletonSpan,
    StoreError, TracePage, TraceQuery, WalkLimits, WriteAck, WriterStats,
};

/// Instances bound to a lineage node (an image, adapter, model or route) lately.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    pub node: NodeId,
    pub instances: u64,
}

/// The slowest (or failed) spans matching dimension values in a window: examples for
/// a diagnosis.
#[derive(Clone, Debug, Default)]
pub struct ExemplarQuery {
    /// Each (dimension, value) must hold on the span; only `EXEMPLAR_DIMENSIONS`.
    pub filters: Vec<(Dimension, String)>,
    pub from_ns: i64,
    pub to_ns: i64,
    pub min_duration_ns: Option<i64>,
    pub errors_only: bool,
    pub limit: usize,
}

/// The dimensions a span carries itself, which exemplars can be filtered by (gray tag,
/// provider and the upstream service are known only to rollups).
pub const EXEMPLAR_DIMENSIONS: [Dimension; 8] = [
    Dimension::Service,
    Dimension::Route,
    Dimension::Model,
    Dimension::Adapter,
    Dimension::Instance,
    Dimension::Image,
    Dimension::PromptVersion,
    Dimension::AbGroup,
];

/// Opens spans of one trace whole, one at a time (`Store::open_trace`): a caller
/// walking a trace of any size holds its skeleton and this, never every record.
pub trait OpenSpans: Send {
    /// The full record of a span of this reader's trace.
    fn span(&mut self, skeleton: &SkeletonSpan) -> Result<SpanRecord, StoreError>;
}

/// A trace opened for a walk of any size.
pub struct SpanReader(Box<dyn OpenSpans>);

impl SpanReader {
    pub fn new(open: impl OpenSpans + 'static) -> Self {
        Self(Box::new(open))
    }

    pub fn span(&mut self, skeleton: &SkeletonSpan) -> Result<SpanRecord, StoreError> {
        self.0.span(skeleton)
    }
}

/// Every operation a storage backend answers. Times are unix nanoseconds; minutes are
/// unix minutes of span start time. A tenant that has written nothing reads as empty.
pub trait StoreBackend: Send + Sync {
    // ---- writes: each returns once queued; the ack resolves once durable ----

    /// Stores spans and the lineage bindings found on them. `observed` are the requests
    /// and model calls among the spans (`threadline_analysis::observe`): they are rolled
    /// up with the spans, but for those whose span a recent batch already had (a
    /// retried export: the spans are stored again, readers show the first copy), which
    /// are removed from `observed` so the caller's own counts leave them out too.
    /// CPU-bound: call it off the async runtime.
    fn write_spans(
        &self,
        tenant: &TenantId,
        spans: &[SpanRecord],
        observed: &mut Vec<Observed>,
        bindings: GraphUpdate,
    ) -> Result<WriteAck, StoreError>;

    /// Stores log records (CPU-bound: call it off the async runtime).
    fn write_logs(&self, tenant: &TenantId, records: &[LogRecord]) -> Result<WriteAck, StoreError>;

    /// Applies a lineage graph change; the ack says whether it changed anything (an
    /// update keyed by an already-stored event does not) and what each registry entry
    /// became.
    fn write_graph(
        &self,
        tenant: &TenantId,
        update: GraphUpdate,
        received_ns: i64,
    ) -> Result<WriteAck, StoreError>;

    /// Erases every trace, log and copy of a user or session in the tenant, and records
    /// the erasure in the tenant's audit log; the ack carries the report.
    fn erase(
        &self,
        tenant: &TenantId,
        subject: ErasureSubject,
        requested_by: &str,
        requested_ns: i64,
    ) -> Result<WriteAck, StoreError>;

    /// Stores incidents (new or updated) and the detector's progress together.
    fn save_incidents(
        &self,
        tenant: &TenantId,
        incidents: Vec<Incident>,
        processed_minute: i64,
    ) -> Result<WriteAck, StoreError>;

    // ---- traces ----

    /// Every span of one trace, in start order. Empty when the tenant has no such trace.
    fn get_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SpanRecord>, StoreError>;

    /// Every span of one trace as a skeleton (no detail opened), in start order.
    fn trace_skeleton(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SkeletonSpan>, StoreError>;

    /// A trace opened for a walk of any size: its skeleton and a reader that opens its
    /// spans whole, one at a time. `None` when the tenant has no such trace.
    fn open_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Option<(Vec<SkeletonSpan>, SpanReader)>, StoreError>;

    /// One span of a trace, whole, or `None`.
    fn get_span(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: SpanId,
    ) -> Result<Option<SpanRecord>, StoreError>;

    /// Trace summaries matching `query`, newest trace start first, a page at a time;
    /// `InvalidQuery` when `query.problem()` says it cannot run.
    fn search(&self, tenant: &TenantId, query: &TraceQuery) -> Result<TracePage, StoreError>;

    /// Up to `limit` session ids with spans starting in `from..=to` (nanoseconds),
    /// most recent first; with `user`, that user's sessions.
    fn recent_sessions(
        &self,
        tenant: &TenantId,
        range: (Option<u64>, Option<u64>),
        user: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;

    fn services(&self, tenant: &TenantId) -> Result<Vec<ServiceSummary>, StoreError>;

    /// Distinct (service, span name, kind), of one service or all, sorted.
    fn operations(
        &self,
        tenant: &TenantId,
        service: Option<&str>,
    ) -> Result<Vec<(String, String, SpanKind)>, StoreError>;

    /// The slowest (or failed) spans matching `query`: (trace, duration in ns).
    fn exemplars(
        &self,
        tenant: &TenantId,
        query: &ExemplarQuery,
    ) -> Result<Vec<(TraceId, u64)>, StoreError>;

    /// Distinct traces that went through the given adapters / instances since a time.
    fn requests_served(
        &self,
        tenant: &TenantId,
        adapters: &[String],
        instances: &[String],
        since_ns: i64,
    ) -> Result<RequestsServed, StoreError>;

    // ---- logs ----

    /// The logs of a trace, or of one of its spans, oldest first.
    fn logs_of(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: Option<SpanId>,
    ) -> Result<Vec<LogRecord>, StoreError>;

    /// Log records newest first, filtered, a page at a time.
    fn search_logs(&self, tenant: &TenantId, query: &LogQuery) -> Result<LogPage, StoreError>;

    // ---- lineage ----

    /// The node ids `name` may mean: a `kind:key` that exists, else every node whose
    /// key or bare name (last `:`-segment) is `name`.
    fn resolve_node(&self, tenant: &TenantId, name: &str) -> Result<Vec<NodeId>, StoreError>;

    fn get_node(&self, tenant: &TenantId, id: &NodeId) -> Result<Option<LineageNode>, StoreError>;

    /// Nodes of `kind` (any kind: `None`) whose key contains `contains` (any case),
    /// most recently seen first.
    fn find_nodes(
        &self,
        tenant: &TenantId,
        kind: Option<NodeKind>,
        contains: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LineageNode>, StoreError>;

    /// How many lineage nodes of each kind the tenant has.
    fn node_counts(&self, tenant: &TenantId) -> Result<Vec<(NodeKind, u64)>, StoreError>;

    /// Runs whose OpenLineage events carried this trace id (parent facet `traceId`).
    fn runs_for_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<NodeId>, StoreError>;

    /// The tenant's whole graph, or `None` when it has more than `max_nodes` nodes.
    fn graph_dump(
        &self,
        tenant: &TenantId,
        max_nodes: usize,
    ) -> Result<Option<LineageGraph>, StoreError>;

    /// The subgraph reached from `start`; `None` when the tenant has no such node.
    fn walk(
        &self,
        tenant: &TenantId,
        start: &NodeId,
        limits: &WalkLimits,
    ) -> Result<Option<LineageGraph>, StoreError>;

    /// Instances bound to each image, adapter / model and route in the last 15 minutes
    /// of span time.
    fn bound_instances(&self, tenant: &TenantId) -> Result<Vec<Bound>, StoreError>;

    // ---- rollups, service hops, incidents ----

    /// Rollup cells with minutes in `from_minute..=to_minute`.
    fn rollup_cells(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<(i64, SeriesKey, RollupCell)>, StoreError>;

    /// The first and last minute holding rollup cells.
    fn rollup_minute_range(&self, tenant: &TenantId) -> Result<Option<(i64, i64)>, StoreError>;

    /// Calls between services in `from_minute..=to_minute`, merged per hop.
    fn service_hops(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<(Hop, HopCell)>, StoreError>;

    /// Incidents with onsets in `from_minute..=to_minute`, earliest first.
    fn incidents(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<Incident>, StoreError>;

    fn incident(&self, tenant: &TenantId, id: &IncidentId) -> Result<Option<Incident>, StoreError>;

    /// The last minute the incident detector has processed.
    fn detector_mark(&self, tenant: &TenantId) -> Result<Option<i64>, StoreError>;

    // ---- the store itself ----

    /// Every tenant that has written anything.
    fn tenants(&self) -> Result<Vec<TenantId>, StoreError>;

    /// The tenant's erasure audit log, newest first.
    fn erasures(&self, tenant: &TenantId) -> Result<Vec<ErasureRecord>, StoreError>;

    /// Checks the store answers (the health endpoint).
    fn ping(&self) -> Result<(), StoreError>;

    /// The write queue and what it has committed.
    fn writer_stats(&self) -> WriterStats;

    /// Written data the search indexes have not reached yet (blocks; 0 once caught
    /// up): searches still find it, more slowly.
    fn index_backlog(&self) -> Result<u64, StoreError>;

    /// Stores spans and waits until they are durable: for callers outside an async
    /// runtime (tests, tools).
    fn write_blocking(&self, tenant: &TenantId, spans: &[SpanRecord]) -> Result<(), StoreError> {
        let mut batch = SpanBatch::of(spans);
        self.write_spans(tenant, spans, &mut batch.observed, batch.bindings)?
            .wait_blocking()
            .map(drop)
    }

    /// Takes or renews the lease `name` for `holder` (a replica's id) for `ttl_ns`
    /// nanoseconds: whether `holder` holds it now. Work that must run on one replica at
    /// a time (incident detection and its alerts) runs only while its lease is held;
    /// a holder that stops renewing loses it after `ttl_ns`. A store only one process
    /// opens (the embedded one) grants it always.
    fn hold_lease(&self, name: &str, holder: &str, ttl_ns: i64) -> Result<bool, StoreError> {
        let _ = (name, holder, ttl_ns);
        Ok(true)
    }

    /// The embedded backend, for benchmarks and tools that measure its internals
    /// (`Store::as_sqlite`); `None` for every other backend.
    fn as_sqlite(&self) -> Option<&crate::sqlite::SqliteStore> {
        None
    }

    /// A hint that a write is being prepared (an export request being decoded and
    /// converted): hold it until the write is handed over. A backend that groups
    /// writes waits for what is coming (the embedded writer's group commit); one that
    /// does not ignores it.
    fn write_coming(&self) -> WriteComing {
        WriteComing::none()
    }
}

/// A write on its way to the store (`StoreBackend::write_coming`); dropping it says
/// the write was handed over, or will not come.
pub struct WriteComing(Option<Arc<std::sync::atomic::AtomicUsize>>);

impl WriteComing {
    /// A hint no backend watches.
    pub fn none() -> Self {
        Self(None)
    }

    /// Counted in `coming` until dropped.
    pub(crate) fn counted_in(coming: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        coming.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Self(Some(Arc::clone(coming)))
    }
}

impl Drop for WriteComing {
    fn drop(&mut self) {
        if let Some(coming) = &self.0 {
            coming.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// What a batch of spans adds beyond the spans, found once by every writer before
/// `write_spans`: the requests and model calls among them (`threadline_analysis::
/// observe`: rollups, metrics) and the lineage bindings they carry (`threadline_lineage::
/// span_bindings`). CPU-bound: build it off the async runtime.
pub struct SpanBatch {
    pub observed: Vec<Observed>,
    pub bindings: GraphUpdate,
}

impl SpanBatch {
    pub fn of(spans: &[SpanRecord]) -> Self {
        Self {
            observed: threadline_analysis::observe(spans),
            bindings: GraphUpdate {
                edges: threadline_lineage::span_bindings(spans),
                ..Default::default()
            },
        }
    }
}

/// The store every part of Threadline holds: cheap to clone, shared by every handler.
#[derive(Clone)]
pub struct Store(Arc<dyn StoreBackend>);

impl Store {
    pub fn new(backend: impl StoreBackend + 'static) -> Self {
        Self(Arc::new(backend))
    }

    /// Opens (creating and migrating if needed) the embedded store under `data_dir`.
    pub fn open_embedded(
        data_dir: &std::path::Path,
        config: crate::EmbeddedConfig,
    ) -> Result<Self, StoreError> {
        crate::sqlite::SqliteStore::open(data_dir, config).map(Self::new)
    }
}

impl std::ops::Deref for Store {
    type Target = dyn StoreBackend;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
