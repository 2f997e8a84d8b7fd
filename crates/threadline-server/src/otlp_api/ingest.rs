//! The ingest path shared by OTLP/HTTP and OTLP/gRPC, for traces and logs (`Signal`):
//! the pipeline (`threadline_diagnosis::ingest`: convert, observe, bind, queue) off the
//! async runtime, the writer refusing when full, the answer only after the commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use threadline_ingest::{
    ContentKind, ConvertedBatch, ConvertedLogs, DecodeError, ExportLogsPartialSuccess,
    ExportLogsServiceResponse, ExportTracePartialSuccess, ExportTraceServiceResponse, TimeBounds,
};
use threadline_model::TenantId;
use threadline_store::{ErrorKind, Store, StoreError, WriteAck, WriteComing};

use crate::telemetry::IngestStats;

/// Why an export was not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IngestFailure {
    #[error("server is busy: {0}; retry later")]
    Busy(String),
    /// The store refused or failed; its kind says the status (`error::store_status`).
    #[error("{}", .0.public_message())]
    Store(StoreError),
    #[error("ingest failed: {0}")]
    Internal(String),
}

impl IngestFailure {
    /// The HTTP status and gRPC code of this failure (logging what the client is not
    /// told).
    pub(crate) fn statuses(&self) -> (axum::http::StatusCode, tonic::Code) {
        match self {
            IngestFailure::Busy(_) => crate::error::store_status(ErrorKind::Busy),
            IngestFailure::Store(e) => {
                crate::error::log_store_failure(e);
                crate::error::store_status(e.kind())
            }
            IngestFailure::Internal(detail) => {
                tracing::error!(%detail, "ingest failed");
                crate::error::store_status(ErrorKind::Unavailable)
            }
        }
    }
}

/// A converted request, queued for the writer (or refused).
pub(crate) struct ReadyBatch {
    /// The queued write and how many spans it holds; `None` when nothing was left.
    submitted: Option<(Result<WriteAck, StoreError>, u64)>,
    tenant: TenantId,
    /// What `/metrics` counts once the batch is committed.
    observations: crate::telemetry::LlmObservations,
    response: ExportTraceServiceResponse,
    rejected: u64,
}

/// Counts the refused records and waits for the queued ones to be durable, then counts
/// them; whether anything was stored. A refusal counts as throttled when the store was
/// busy (429 / RESOURCE_EXHAUSTED).
async fn settle(
    ctx: &IngestContext,
    submitted: Option<(Result<WriteAck, StoreError>, u64)>,
    (rejected, rejected_count): (u64, &AtomicU64),
    accepted_count: &AtomicU64,
) -> Result<bool, IngestFailure> {
    rejected_count.fetch_add(rejected, Ordering::Relaxed);
    let Some((queued, count)) = submitted else {
        return Ok(false);
    };
    let ack = queued.inspect_err(|e| {
        if e.kind() == ErrorKind::Busy {
            ctx.stats.requests_throttled.fetch_add(1, Ordering::Relaxed);
        }
    });
    ack.map_err(IngestFailure::Store)?
        .wait()
        .await
        .map_err(IngestFailure::Store)?;
    accepted_count.fetch_add(count, Ordering::Relaxed);
    Ok(true)
}

/// Converted log records, queued for the writer (or refused).
pub(crate) struct ReadyLogs {
    submitted: Option<(Result<WriteAck, StoreError>, u64)>,
    response: ExportLogsServiceResponse,
    rejected: u64,
}

/// One OTLP signal the receivers take: its messages and its two ingest halves.
pub(crate) trait Signal: Send + Sync + 'static {
    /// A request's records as decoded and converted from its body, the refused ones
    /// counted.
    type Decoded: Send + 'static;
    type Response: prost::Message + serde::Serialize + Send + 'static;
    type Ready: Send + 'static;
    /// The HTTP path and the gRPC method path.
    const HTTP_PATH: &'static str;
    const GRPC_PATH: &'static str;

    /// CPU-bound, with `prepare`: one decompressed body (protobuf for gRPC), decoded
    /// and converted, record times checked against `bounds`.
    fn decode(
        kind: ContentKind,
        body: &[u8],
        bounds: &TimeBounds,
    ) -> Result<Self::Decoded, DecodeError>;

    /// CPU-bound half: the records queued for the store (what did not decode or
    /// convert answered through partial success). Run it on the ingest CPU pool.
    /// `coming`: `Store::write_coming`, taken before the request was decoded.
    fn prepare(
        store: &Store,
        tenant: &TenantId,
        decoded: Self::Decoded,
        coming: WriteComing,
    ) -> Result<Self::Ready, IngestFailure>;

    /// Waits until the queued records are durable.
    fn commit(
        ctx: &IngestContext,
        ready: Self::Ready,
    ) -> impl std::future::Future<Output = Result<Self::Response, IngestFailure>> + Send;
}

/// OTLP traces.
pub(crate) struct Traces;

impl Signal for Traces {
    type Decoded = ConvertedBatch;
    type Response = ExportTraceServiceResponse;
    type Ready = ReadyBatch;
    const HTTP_PATH: &'static str = "/v1/traces";
    const GRPC_PATH: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

    fn decode(
        kind: ContentKind,
        body: &[u8],
        bounds: &TimeBounds,
    ) -> Result<Self::Decoded, DecodeError> {
        threadline_ingest::decode_traces(kind, body, bounds)
    }

    fn prepare(
        store: &Store,
        tenant: &TenantId,
        decoded: Self::Decoded,
        coming: WriteComing,
    ) -> Result<Self::Ready, IngestFailure> {
        let queued = threadline_diagnosis::ingest::queue_traces(store, tenant, decoded, coming);
        let partial_success = queued
            .error_message
            .map(|error_message| ExportTracePartialSuccess {
                rejected_spans: queued.rejected as i64,
                error_message,
            });
        Ok(ReadyBatch {
            submitted: queued.submitted,
            tenant: tenant.clone(),
            observations: crate::telemetry::LlmObservations::of_observed(
                &queued.spans,
                &queued.observed,
            ),
            response: ExportTraceServiceResponse { partial_success },
            rejected: queued.rejected,
        })
    }

    async fn commit(
        ctx: &IngestContext,
        ready: Self::Ready,
    ) -> Result<Self::Response, IngestFailure> {
        let stats = &ctx.stats;
        let rejected = (ready.rejected, &stats.spans_rejected);
        if settle(ctx, ready.submitted, rejected, &stats.spans_accepted).await? {
            ctx.llm_metrics.record(&ready.tenant, &ready.observations);
        }
        Ok(ready.response)
    }
}

/// OTLP logs.
pub(crate) struct Logs;

impl Signal for Logs {
    type Decoded = ConvertedLogs;
    type Response = ExportLogsServiceResponse;
    type Ready = ReadyLogs;
    const HTTP_PATH: &'static str = "/v1/logs";
    const GRPC_PATH: &'static str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

    fn decode(
        kind: ContentKind,
        body: &[u8],
        bounds: &TimeBounds,
    ) -> Result<Self::Decoded, DecodeError> {
        threadline_ingest::decode_logs(kind, body, bounds)
    }

    fn prepare(
        store: &Store,
        tenant: &TenantId,
        decoded: Self::Decoded,
        coming: WriteComing,
    ) -> Result<Self::Ready, IngestFailure> {
        let queued = threadline_diagnosis::ingest::queue_logs(store, tenant, decoded, coming);
        let partial_success = queued
            .error_message
            .map(|error_message| ExportLogsPartialSuccess {
                rejected_log_records: queued.rejected as i64,
                error_message,
            });
        Ok(ReadyLogs {
            submitted: queued.submitted,
            response: ExportLogsServiceResponse { partial_success },
            rejected: queued.rejected,
        })
    }

    async fn commit(
        ctx: &IngestContext,
        ready: Self::Ready,
    ) -> Result<Self::Response, IngestFailure> {
        let stats = &ctx.stats;
        let rejected = (ready.rejected, &stats.logs_rejected);
        settle(ctx, ready.submitted, rejected, &stats.logs_accepted).await?;
        Ok(ready.response)
    }
}

/// Shared by both transports.
#[derive(Clone)]
pub(crate) struct IngestContext {
    pub(crate) store: Store,
    pub(crate) stats: Arc<IngestStats>,
    pub(crate) auth: Arc<crate::auth::Authenticator>,
    /// Decode/convert/encode work runs here, off the async runtime, about one task per
    /// core: more at once would not go faster, and each thread keeps an allocator heap.
    pub(crate) cpu_pool: Arc<crate::cpu_pool::CpuPool>,
    pub(crate) llm_metrics: Arc<crate::telemetry::LlmMetrics>,
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
            .map_err(|e| IngestFailure::Internal(format!("ingest task failed: {e}")))
    }
}
