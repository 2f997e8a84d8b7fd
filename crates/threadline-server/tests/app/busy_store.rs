//! A store whose writes are all refused as busy (a full write queue, whatever the
//! backend): the app must answer 429 with Retry-After, never 500.

use threadline_analysis::hops::{Hop, HopCell};
use threadline_analysis::{Incident, IncidentId, Observed, RollupCell, SeriesKey};
use threadline_model::{
    GraphUpdate, LineageGraph, LineageNode, LogRecord, NodeId, NodeKind, SpanId, SpanKind,
    SpanRecord, TenantId, TraceId,
};
use threadline_store::{
    Bound, ErasureRecord, ErasureSubject, ExemplarQuery, LogPage, LogQuery, RequestsServed,
    ServiceSummary, SkeletonSpan, SpanReader, Store, StoreBackend, StoreError, TracePage,
    TraceQuery, WalkLimits, WriteAck, WriterStats,
};

/// Reads go to the store inside; writes are refused.
pub(crate) struct BusyStore(pub(crate) Store);

impl StoreBackend for BusyStore {
    fn write_spans(
        &self,
        _tenant: &TenantId,
        _spans: &[SpanRecord],
        _observed: &mut Vec<Observed>,
        _bindings: GraphUpdate,
    ) -> Result<WriteAck, StoreError> {
        Err(StoreError::busy("the store is busy (injected)"))
    }

    fn write_logs(
        &self,
        _tenant: &TenantId,
        _records: &[LogRecord],
    ) -> Result<WriteAck, StoreError> {
        Err(StoreError::busy("the store is busy (injected)"))
    }

    fn write_graph(
        &self,
        _tenant: &TenantId,
        _update: GraphUpdate,
        _received_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        Err(StoreError::busy("the store is busy (injected)"))
    }

    fn erase(
        &self,
        _tenant: &TenantId,
        _subject: ErasureSubject,
        _requested_by: &str,
        _requested_ns: i64,
    ) -> Result<WriteAck, StoreError> {
        Err(StoreError::busy("the store is busy (injected)"))
    }

    fn save_incidents(
        &self,
        _tenant: &TenantId,
        _incidents: Vec<Incident>,
        _processed_minute: i64,
    ) -> Result<WriteAck, StoreError> {
        Err(StoreError::busy("the store is busy (injected)"))
    }

    fn get_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SpanRecord>, StoreError> {
        self.0.get_trace(tenant, trace_id)
    }

    fn trace_skeleton(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<SkeletonSpan>, StoreError> {
        self.0.trace_skeleton(tenant, trace_id)
    }

    fn open_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Option<(Vec<SkeletonSpan>, SpanReader)>, StoreError> {
        self.0.open_trace(tenant, trace_id)
    }

    fn get_span(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: SpanId,
    ) -> Result<Option<SpanRecord>, StoreError> {
        self.0.get_span(tenant, trace_id, span_id)
    }

    fn search(&self, tenant: &TenantId, query: &TraceQuery) -> Result<TracePage, StoreError> {
        self.0.search(tenant, query)
    }

    fn recent_sessions(
        &self,
        tenant: &TenantId,
        range: (Option<u64>, Option<u64>),
        user: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.0.recent_sessions(tenant, range, user, limit)
    }

    fn services(&self, tenant: &TenantId) -> Result<Vec<ServiceSummary>, StoreError> {
        self.0.services(tenant)
    }

    fn operations(
        &self,
        tenant: &TenantId,
        service: Option<&str>,
    ) -> Result<Vec<(String, String, SpanKind)>, StoreError> {
        self.0.operations(tenant, service)
    }

    fn exemplars(
        &self,
        tenant: &TenantId,
        query: &ExemplarQuery,
    ) -> Result<Vec<(TraceId, u64)>, StoreError> {
        self.0.exemplars(tenant, query)
    }

    fn requests_served(
        &self,
        tenant: &TenantId,
        adapters: &[String],
        instances: &[String],
        since_ns: i64,
    ) -> Result<RequestsServed, StoreError> {
        self.0
            .requests_served(tenant, adapters, instances, since_ns)
    }

    fn logs_of(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
        span_id: Option<SpanId>,
    ) -> Result<Vec<LogRecord>, StoreError> {
        self.0.logs_of(tenant, trace_id, span_id)
    }

    fn search_logs(&self, tenant: &TenantId, query: &LogQuery) -> Result<LogPage, StoreError> {
        self.0.search_logs(tenant, query)
    }

    fn resolve_node(&self, tenant: &TenantId, name: &str) -> Result<Vec<NodeId>, StoreError> {
        self.0.resolve_node(tenant, name)
    }

    fn get_node(&self, tenant: &TenantId, id: &NodeId) -> Result<Option<LineageNode>, StoreError> {
        self.0.get_node(tenant, id)
    }

    fn find_nodes(
        &self,
        tenant: &TenantId,
        kind: Option<NodeKind>,
        contains: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LineageNode>, StoreError> {
        self.0.find_nodes(tenant, kind, contains, limit)
    }

    fn node_counts(&self, tenant: &TenantId) -> Result<Vec<(NodeKind, u64)>, StoreError> {
        self.0.node_counts(tenant)
    }

    fn runs_for_trace(
        &self,
        tenant: &TenantId,
        trace_id: TraceId,
    ) -> Result<Vec<NodeId>, StoreError> {
        self.0.runs_for_trace(tenant, trace_id)
    }

    fn graph_dump(
        &self,
        tenant: &TenantId,
        max_nodes: usize,
    ) -> Result<Option<LineageGraph>, StoreError> {
        self.0.graph_dump(tenant, max_nodes)
    }

    fn walk(
        &self,
        tenant: &TenantId,
        start: &NodeId,
        limits: &WalkLimits,
    ) -> Result<Option<LineageGraph>, StoreError> {
        self.0.walk(tenant, start, limits)
    }

    fn bound_instances(&self, tenant: &TenantId) -> Result<Vec<Bound>, StoreError> {
        self.0.bound_instances(tenant)
    }

    fn rollup_cells(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<(i64, SeriesKey, RollupCell)>, StoreError> {
        self.0.rollup_cells(tenant, from_minute, to_minute)
    }

    fn rollup_minute_range(&self, tenant: &TenantId) -> Result<Option<(i64, i64)>, StoreError> {
        self.0.rollup_minute_range(tenant)
    }

    fn service_hops(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<(Hop, HopCell)>, StoreError> {
        self.0.service_hops(tenant, from_minute, to_minute)
    }

    fn incidents(
        &self,
        tenant: &TenantId,
        from_minute: i64,
        to_minute: i64,
    ) -> Result<Vec<Incident>, StoreError> {
        self.0.incidents(tenant, from_minute, to_minute)
    }

    fn incident(&self, tenant: &TenantId, id: &IncidentId) -> Result<Option<Incident>, StoreError> {
        self.0.incident(tenant, id)
    }

    fn detector_mark(&self, tenant: &TenantId) -> Result<Option<i64>, StoreError> {
        self.0.detector_mark(tenant)
    }

    fn tenants(&self) -> Result<Vec<TenantId>, StoreError> {
        self.0.tenants()
    }

    fn erasures(&self, tenant: &TenantId) -> Result<Vec<ErasureRecord>, StoreError> {
        self.0.erasures(tenant)
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.0.ping()
    }

    fn writer_stats(&self) -> WriterStats {
        self.0.writer_stats()
    }

    fn index_backlog(&self) -> Result<u64, StoreError> {
        self.0.index_backlog()
    }
}
