//! The ingest path shared by OTLP/HTTP and OTLP/gRPC: convert and encode off the async
//! runtime, queue for the writer (refusing when full), answer only after the commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use threadline_ingest::{
    convert_request, ExportTracePartialSuccess, ExportTraceServiceRequest,
    ExportTraceServiceResponse,
};
use threadline_model::TenantId;
use threadline_store::{PreparedBatch, SqliteStore, StoreError};

/// Counters exposed on the health endpoint (and `/metrics` later).
#[derive(Default)]
pub(crate) struct IngestStats {
    pub(crate) spans_accepted: AtomicU64,
    pub(crate) spans_rejected: AtomicU64,
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

/// CPU-bound half: OTLP → records → encoded rows. Run it on the ingest CPU pool.
pub(crate) fn prepare(
    store: &SqliteStore,
    tenant: &TenantId,
    request: ExportTraceServiceRequest,
) -> Result<ReadyBatch, IngestFailure> {
    let converted = convert_request(request);
    let partial_success = (converted.rejected_spans > 0).then(|| ExportTracePartialSuccess {
        rejected_spans: converted.rejected_spans as i64,
        error_message: converted.error_message(),
    });
    let requests = threadline_analysis::SeriesKey::requests(&converted.spans);
    let observations = crate::prometheus::LlmObservation::of_requests(&converted.spans, &requests);
    let prepared = if converted.spans.is_empty() {
        None
    } else {
        let mut prepared = store
            .prepare(tenant, &converted.spans, requests)
            .map_err(|e| IngestFailure::Unavailable(e.to_string()))?;
        prepared.attach_graph(threadline_model::GraphUpdate {
            edges: threadline_lineage::span_bindings(&converted.spans),
            ..Default::default()
        });
        Some(prepared)
    };
    Ok(ReadyBatch {
        prepared,
        tenant: tenant.clone(),
        observations,
        response: ExportTraceServiceResponse { partial_success },
        rejected: converted.rejected_spans,
    })
}

/// Queues the batch and waits for its commit.
pub(crate) async fn commit(
    ctx: &IngestContext,
    batch: ReadyBatch,
) -> Result<ExportTraceServiceResponse, IngestFailure> {
    let (store, stats) = (&ctx.store, &ctx.stats);
    stats
        .spans_rejected
        .fetch_add(batch.rejected, Ordering::Relaxed);
    let Some(prepared) = batch.prepared else {
        return Ok(batch.response);
    };
    let count = prepared.span_count() as u64;
    let ack = match store.submit(prepared) {
        Ok(ack) => ack,
        Err(e @ StoreError::QueueFull { .. }) => {
            stats.requests_throttled.fetch_add(1, Ordering::Relaxed);
            return Err(IngestFailure::Busy(e.to_string()));
        }
        Err(e) => return Err(IngestFailure::Unavailable(e.to_string())),
    };
    ack.wait()
        .await
        .map_err(|e| IngestFailure::Unavailable(e.to_string()))?;
    stats.spans_accepted.fetch_add(count, Ordering::Relaxed);
    ctx.llm_metrics.record(&batch.tenant, &batch.observations);
    Ok(batch.response)
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
}

impl IngestContext {
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
