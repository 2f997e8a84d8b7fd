//! The ingest pipeline both OTLP transports share, below the protocol: an export
//! request converted to records (what did not convert counted, with reasons), the
//! requests, model calls and lineage bindings found on the spans (`SpanBatch`), and
//! the records queued for the store. CPU-bound: the server runs it on its ingest
//! pool, then waits for the ack off it.

use threadline_analysis::Observed;
use threadline_ingest::{ConvertedBatch, ConvertedLogs};
use threadline_model::{SpanRecord, TenantId};
use threadline_store::{SpanBatch, Store, StoreError, WriteAck, WriteComing};

/// One export request of spans, converted and queued.
pub struct TracesQueued {
    /// The queued write and how many spans it holds; `None` when no span was left.
    pub submitted: Option<(Result<WriteAck, StoreError>, u64)>,
    /// The spans queued and the requests and model calls among them, less those a
    /// retried export repeats (for the caller's own counts, once the write is durable).
    pub spans: Vec<SpanRecord>,
    pub observed: Vec<Observed>,
    /// Spans refused (they did not decode or convert) and the first reasons.
    pub rejected: u64,
    pub error_message: Option<String>,
}

/// Queues the spans of an export request as converted (`threadline_ingest::decode_traces`,
/// or `convert_request`), the refused ones counted. `coming` (`Store::write_coming`,
/// taken when the request's decoding began) is let go as the spans are handed to the
/// store.
pub fn queue_traces(
    store: &Store,
    tenant: &TenantId,
    converted: ConvertedBatch,
    coming: WriteComing,
) -> TracesQueued {
    let error_message = (converted.rejected_spans > 0).then(|| converted.error_message());
    let mut found = SpanBatch::of(&converted.spans);
    drop(coming);
    let submitted = (!converted.spans.is_empty()).then(|| {
        // Leaves out of `observed` what a retried export repeats.
        let queued = store.write_spans(
            tenant,
            &converted.spans,
            &mut found.observed,
            found.bindings,
        );
        (queued, converted.spans.len() as u64)
    });
    TracesQueued {
        submitted,
        spans: converted.spans,
        observed: found.observed,
        rejected: converted.rejected_spans,
        error_message,
    }
}

/// One export request of log records, converted and queued.
pub struct LogsQueued {
    pub submitted: Option<(Result<WriteAck, StoreError>, u64)>,
    pub rejected: u64,
    pub error_message: Option<String>,
}

/// Queues the records of a logs export request as converted
/// (`threadline_ingest::decode_logs`), the refused ones counted; `coming` as for
/// `queue_traces`.
pub fn queue_logs(
    store: &Store,
    tenant: &TenantId,
    converted: ConvertedLogs,
    coming: WriteComing,
) -> LogsQueued {
    drop(coming);
    let error_message = (converted.rejected > 0).then(|| converted.error_message());
    let submitted = (!converted.records.is_empty()).then(|| {
        (
            store.write_logs(tenant, &converted.records),
            converted.records.len() as u64,
        )
    });
    LogsQueued {
        submitted,
        rejected: converted.rejected,
        error_message,
    }
}
