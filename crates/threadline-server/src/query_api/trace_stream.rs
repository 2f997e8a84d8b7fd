//! `GET /api/v1/traces/{id}` as a stream: the trace's tree of whole spans, written
//! span by span while a reader opens each one, so that one read of a trace of any
//! size holds its skeleton (≈ 200 bytes a span), a bounded cache of decompressed
//! blocks and a few chunks of output, never every record and its JSON at once.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use threadline_analysis::PriceTable;
use threadline_model::{TenantId, TraceId};
use threadline_store::{SkeletonSpan, SpanReader, Store};

use crate::dto;
use crate::error::ApiError;
use crate::query_api::trace_view::Tree;
use threadline_model::trace_tree;

/// Output buffered before it is handed to the connection.
const CHUNK_BYTES: usize = 64 * 1024;

/// Chunks in flight between the reading thread and the connection.
const CHUNKS_IN_FLIGHT: usize = 4;

/// A trace opened for streaming: its skeleton (start order) and a reader of whole
/// spans; 404 (before anything is sent) when the tenant has no such trace.
pub(crate) async fn open_trace(
    store: Store,
    tenant: TenantId,
    trace_id: TraceId,
) -> Result<(Vec<SkeletonSpan>, SpanReader), ApiError> {
    crate::error::blocking(move || opened_trace(&store, &tenant, trace_id)).await
}

/// `Store::open_trace`, with 404 for a trace the tenant does not have.
pub(crate) fn opened_trace(
    store: &Store,
    tenant: &TenantId,
    trace_id: TraceId,
) -> Result<(Vec<SkeletonSpan>, SpanReader), ApiError> {
    store
        .open_trace(tenant, trace_id)?
        .ok_or_else(|| ApiError::NotFound(format!("trace {trace_id} not found")))
}

/// A 200 JSON response whose body `write` produces on a blocking thread: sent whole
/// (with its length) when it fits in one chunk, else in chunks while the connection
/// sends them. When `write` fails before its first chunk, the answer is its error
/// instead (404 for a trace the tenant does not have).
pub(crate) async fn streamed(
    what: &'static str,
    write: impl FnOnce(&mut ChunkWriter) -> Result<(), WriteStop> + Send + 'static,
) -> Response {
    let (sender, receiver) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    let (first, first_out) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut out = ChunkWriter {
            buf: Vec::with_capacity(CHUNK_BYTES),
            first: Some(first),
            sender,
        };
        match write(&mut out) {
            Ok(()) => out.finish(),
            Err(e) => match out.first.take() {
                Some(first) => {
                    let _ = first.send(First::Refused(e.into()));
                }
                // Past the first chunk the status line is gone: the body is cut off.
                None => tracing::warn!(error = %e, "{what} cut short"),
            },
        }
    });
    let mut response = match first_out.await {
        Ok(First::Whole(body)) => Body::from(body).into_response(),
        Ok(First::Refused(e)) => return e.into_response(),
        Ok(First::Streaming) => {
            Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver)).into_response()
        }
        Err(_) => {
            return ApiError::Internal(format!("{what} failed before its first byte"))
                .into_response()
        }
    };
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// How a streamed body starts.
enum First {
    /// It was complete within one chunk.
    Whole(Bytes),
    /// Its chunks follow on the channel.
    Streaming,
    /// It failed before its first byte.
    Refused(ApiError),
}

/// Answers with the trace, or 404 before anything is sent.
pub(crate) async fn trace_response(
    store: Store,
    tenant: TenantId,
    trace_id: TraceId,
    prices: Arc<PriceTable>,
) -> Response {
    // Opened on the writing thread: one hand-off to a blocking thread, not two.
    streamed("trace response", move |out| {
        let (spans, reader) =
            opened_trace(&store, &tenant, trace_id).map_err(WriteStop::Refused)?;
        write_trace(out, trace_id, &spans, reader, &prices)
    })
    .await
}

/// Why writing stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteStop {
    #[error("the client went away")]
    Gone,
    #[error(transparent)]
    Store(#[from] threadline_store::StoreError),
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(ApiError),
}

impl From<WriteStop> for ApiError {
    fn from(stop: WriteStop) -> Self {
        match stop {
            WriteStop::Gone => ApiError::Internal("the client went away".to_owned()),
            WriteStop::Store(e) => e.into(),
            WriteStop::Refused(e) => e,
        }
    }
}

/// Output of a streamed response.
pub(crate) struct ChunkWriter {
    buf: Vec<u8>,
    /// Until the first chunk is full: where to say how the body starts.
    first: Option<tokio::sync::oneshot::Sender<First>>,
    sender: tokio::sync::mpsc::Sender<Result<Bytes, Infallible>>,
}

impl ChunkWriter {
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), WriteStop> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            if let Some(first) = self.first.take() {
                first.send(First::Streaming).map_err(|_| WriteStop::Gone)?;
            }
            let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
            self.sender
                .blocking_send(Ok(Bytes::from(chunk)))
                .map_err(|_| WriteStop::Gone)?;
        }
        Ok(())
    }

    fn finish(mut self) {
        let rest = Bytes::from(std::mem::take(&mut self.buf));
        match self.first.take() {
            Some(first) => {
                let _ = first.send(First::Whole(rest));
            }
            None if !rest.is_empty() => {
                let _ = self.sender.blocking_send(Ok(rest));
            }
            None => {}
        }
    }
}

/// The trace object: its summary fields, then `roots`, each span with its
/// `children`, depth first in start order.
fn write_trace(
    out: &mut ChunkWriter,
    trace_id: TraceId,
    spans: &[SkeletonSpan],
    mut reader: SpanReader,
    prices: &PriceTable,
) -> Result<(), WriteStop> {
    let tree = Tree::of(spans);
    let (start, end) = trace_tree::time_bounds(
        spans
            .iter()
            .map(|s| (s.start_time_unix_nano, s.end_time_unix_nano)),
    );
    let mut services: Vec<&str> = spans.iter().map(|s| s.service.as_str()).collect();
    services.sort_unstable();
    services.dedup();
    let (cost, _) = tree.usage(spans, prices);
    let head = json!({
        "trace_id": trace_id.to_hex(),
        "span_count": spans.len(),
        "start_time_unix_nano": start.to_string(),
        "end_time_unix_nano": end.to_string(),
        "duration_ms": end.saturating_sub(start) as f64 / 1e6,
        "services": services,
        "cost_usd": cost,
    })
    .to_string();
    out.write(&head.as_bytes()[..head.len() - 1])?;
    out.write(br#","roots":["#)?;
    let roots = (0..spans.len()).filter(|&i| tree.parent[i].is_none());
    // Depth first without recursion (a trace may be a chain of any depth): each frame
    // is a span whose children are being written, and the next child to write.
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for (n, root) in roots.enumerate() {
        if n > 0 {
            out.write(b",")?;
        }
        open_span(out, &mut reader, spans, &tree, root, prices)?;
        stack.push((root, 0));
        while let Some((span, next)) = stack.last_mut() {
            match tree.children[*span].get(*next) {
                Some(&child) => {
                    if *next > 0 {
                        out.write(b",")?;
                    }
                    *next += 1;
                    open_span(out, &mut reader, spans, &tree, child, prices)?;
                    stack.push((child, 0));
                }
                None => {
                    out.write(b"]}")?;
                    stack.pop();
                }
            }
        }
    }
    out.write(b"]}")
}

/// Writes span `i` up to the opening of its `children` array.
fn open_span(
    out: &mut ChunkWriter,
    reader: &mut SpanReader,
    spans: &[SkeletonSpan],
    tree: &Tree,
    i: usize,
    prices: &PriceTable,
) -> Result<(), WriteStop> {
    let record = reader.span(&spans[i])?;
    let text = dto::span(&record, tree.self_time(spans, i), prices).to_string();
    // `dto::span` is an object with fields: drop its `}` and go on with `children`.
    out.write(&text.as_bytes()[..text.len() - 1])?;
    out.write(br#","children":["#)
}
