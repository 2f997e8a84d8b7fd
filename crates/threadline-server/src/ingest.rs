//! The ingest path shared by OTLP/HTTP and OTLP/gRPC, for traces and logs (`Signal`):
//! convert and encode off the async runtime, queue for the writer (refusing when full),
//! answer only after the commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use threadline_ingest::{
    convert_logs_request, convert_request, ExportLogsPartialSuccess, ExportLogsServiceRequest,
    ExportLogsServiceResponse, ExportRequest, ExportTracePartialSuccess, ExportTraceServiceRequest,
    ExportTraceServiceResponse, TimeBounds, Undecodable,
};
use threadline_model::TenantId;
use threadline_store::{PreparedBatch, SqliteStore, StoreError};

/// Counters exposed on the health endpoint (and `/metrics` later).
#[derive(Default)]
pub(crate) struct IngestStats {
    pub(crate) spans_accepted: AtomicU64,
    pub(crate) spans_rejected: AtomicU64,
    pub(crate) logs_accepted: AtomicU64,
    pub(crate) logs_rejected: AtomicU64,
    pub(crate) requests_throttled: AtomicU64,
}

/// Why an export was not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IngestFailure {
    #[error("server is busy: {0}; retry later")]
    Busy(String),
    #[error("storage is unavailable: {0}")]
    Unavailable(String),
}

/// A converted request, ready to queue.
pub(crate) struct ReadyBatch {
    prepared: Option<PreparedBatch>,
    tenant: TenantId,
    /// What `/metrics` counts once the batch is committed.
    observations: Vec<crate::prometheus::LlmObservation>,
    response: ExportTraceServiceResponse,
    rejected: u64,
}

/// Waits for a submitted write to be durable; a full queue is `Busy` (429 /
/// RESOURCE_EXHAUSTED), anything else `Unavailable`.
async fn wait_durable(
    ctx: &IngestContext,
    submitted: Result<threadline_store::WriteAck, StoreError>,
) -> Result<(), IngestFailure> {
    let ack = match submitted {
        Ok(ack) => ack,
        Err(e @ StoreError::QueueFull { .. }) => {
            ctx.stats.requests_throttled.fetch_add(1, Ordering::Relaxed);
            return Err(IngestFailure::Busy(e.to_string()));
        }
        Err(e) => return Err(IngestFailure::Unavailable(e.to_string())),
    };
    ack.wait()
        .await
        .map(|_| ())
        .map_err(|e| IngestFailure::Unavailable(e.to_string()))
}

/// Converted log records, ready to queue.
pub(crate) struct ReadyLogs {
    prepared: Option<threadline_store::PreparedLogs>,
    response: ExportLogsServiceResponse,
    rejected: u64,
}

/// One OTLP signal the receivers take: its messages and its two ingest halves.
pub(crate) trait Signal: Send + Sync + 'static {
    type Request: ExportRequest + Send + 'static;
    type Response: prost::Message + serde::Serialize + Send + 'static;
    type Ready: Send + 'static;
    /// The HTTP path and the gRPC method path.
    const HTTP_PATH: &'static str;
    const GRPC_PATH: &'static str;

    /// CPU-bound half: OTLP → records → encoded rows (`refused`: the records that did
    /// not decode, for partial success). Run it on the ingest CPU pool.
    fn prepare(
        store: &SqliteStore,
        tenant: &TenantId,
        request: Self::Request,
        refused: Undecodable,
        bounds: &TimeBounds,
    ) -> Result<Self::Ready, IngestFailure>;

    /// Queues the rows and waits until they are durable.
    fn commit(
        ctx: &IngestContext,
        ready: Self::Ready,
    ) -> impl std::future::Future<Output = Result<Self::Response, IngestFailure>> + Send;
}

/// OTLP traces.
pub(crate) struct Traces;

impl Signal for Traces {
    type Request = ExportTraceServiceRequest;
    type Response = ExportTraceServiceResponse;
    type Ready = ReadyBatch;
    const HTTP_PATH: &'static str = "/v1/traces";
    const GRPC_PATH: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

    fn prepare(
        store: &SqliteStore,
        tenant: &TenantId,
        request: Self::Request,
        refused: Undecodable,
        bounds: &TimeBounds,
    ) -> Result<Self::Ready, IngestFailure> {
        let mut converted = convert_request(request, bounds);
        converted.add_undecodable(refused);
        let partial_success = (converted.rejected_spans > 0).then(|| ExportTracePartialSuccess {
            rejected_spans: converted.rejected_spans as i64,
            error_message: converted.error_message(),
        });
        let mut observed = threadline_analysis::observe(&converted.spans);
        let prepared = if converted.spans.is_empty() {
            None
        } else {
            // Leaves out of `observed` what a retried export repeats.
            let mut prepared = store
                .prepare(tenant, &converted.spans, &mut observed)
                .map_err(|e| IngestFailure::Unavailable(e.to_string()))?;
            prepared.attach_graph(threadline_model::GraphUpdate {
                edges: threadline_lineage::span_bindings(&converted.spans),
                ..Default::default()
            });
            Some(prepared)
        };
        let observations =
            crate::prometheus::LlmObservation::of_observed(&converted.spans, &observed);
        Ok(ReadyBatch {
            prepared,
            tenant: tenant.clone(),
            observations,
            response: ExportTraceServiceResponse { partial_success },
            rejected: converted.rejected_spans,
        })
    }

    async fn commit(
        ctx: &IngestContext,
        ready: Self::Ready,
    ) -> Result<Self::Response, IngestFailure> {
        let stats = &ctx.stats;
        stats
            .spans_rejected
            .fetch_add(ready.rejected, Ordering::Relaxed);
        let Some(prepared) = ready.prepared else {
            return Ok(ready.response);
        };
        let count = prepared.span_count() as u64;
        wait_durable(ctx, ctx.store.submit(prepared)).await?;
        stats.spans_accepted.fetch_add(count, Ordering::Relaxed);
        ctx.llm_metrics.record(&ready.tenant, &ready.observations);
        Ok(ready.response)
    }
}

/// OTLP logs.
pub(crate) struct Logs;

impl Signal for Logs {
    type Request = ExportLogsServiceRequest;
    type Response = ExportLogsServiceResponse;
    type Ready = ReadyLogs;
    const HTTP_PATH: &'static str = "/v1/logs";
    const GRPC_PATH: &'static str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

    fn prepare(
        store: &SqliteStore,
        tenant: &TenantId,
        request: Self::Request,
        refused: Undecodable,
        bounds: &TimeBounds,
    ) -> Result<Self::Ready, IngestFailure> {
        let mut converted = convert_logs_request(request, bounds);
        converted.add_undecodable(refused);
        let partial_success = (converted.rejected > 0).then(|| ExportLogsPartialSuccess {
            rejected_log_records: converted.rejected as i64,
            error_message: converted.error_message(),
        });
        let prepared = if converted.records.is_empty() {
            None
        } else {
            Some(
                store
                    .prepare_logs(tenant, &converted.records)
                    .map_err(|e| IngestFailure::Unavailable(e.to_string()))?,
            )
        };
        Ok(ReadyLogs {
            prepared,
            response: ExportLogsServiceResponse { partial_success },
            rejected: converted.rejected,
        })
    }

    async fn commit(
        ctx: &IngestContext,
        ready: Self::Ready,
    ) -> Result<Self::Response, IngestFailure> {
        ctx.stats
            .logs_rejected
            .fetch_add(ready.rejected, Ordering::Relaxed);
        let Some(prepared) = ready.prepared else {
            return Ok(ready.response);
        };
        let count = prepared.record_count() as u64;
        wait_durable(ctx, ctx.store.submit_logs(prepared)).await?;
        ctx.stats.logs_accepted.fetch_add(count, Ordering::Relaxed);
        Ok(ready.response)
    }
}

/// Shared by both transports.
#[derive(Clone)]
pub(crate) struct IngestContext {
    pub(crate) store: SqliteStore,
    pub(crate) stats: Arc<IngestStats>,
    pub(crate) auth: Arc<crate::auth::Authenticator>,
    /// Decode/convert/encode work runs here, off the async runtime, about one task per
    /// core: more at once would not go faster, and each thread keeps an allocator heap.
    pub(crate) cpu_pool: Arc<crate::cpu_pool::CpuPool>,
    pub(crate) llm_metrics: Arc<crate::prometheus::LlmMetrics>,
    /// Which record times are accepted (`[limits]`).
    pub(crate) max_future_skew: std::time::Duration,
    pub(crate) max_span_age: Option<std::time::Duration>,
}

impl IngestContext {
    /// The record times accepted now.
    pub(crate) fn time_bounds(&self) -> TimeBounds {
        TimeBounds::around_now(self.max_future_skew, self.max_span_age)
    }

    /// Runs CPU-bound ingest work on the ingest CPU pool.
    pub(crate) async fn run_cpu<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, IngestFailure> {
        self.cpu_pool
            .run(work)
            .await
            .map_err(|e| IngestFailure::Unavailable(format!("ingest task failed: {e}")))
    }
}
