//! OTLP trace ingest: request bodies (protobuf, JSON, gzip) → OTLP messages → validated
//! `SpanRecord`s with their normalized LLM view. Transport-agnostic: the server crate
//! owns sockets and status codes, this crate owns what the bytes mean.

mod body;
mod conversation;
mod convert;
mod export;
#[cfg(test)]
mod fuzz_tests;
mod normalize;
mod otlp_json;

pub use body::{
    decode_body, decode_export_request, BodyLimits, ContentKind, DecodeError, RpcStatus,
};
pub use conversation::{conversation, Conversation, Message, ToolCall};
pub use convert::{convert_request, ConvertedBatch};
pub use export::{any_value, key_values, to_resource_spans};
pub use normalize::llm_view;
pub use otlp_json::parse_otlp_json;

/// Re-exported so callers name the exact OTLP message types this crate decodes.
pub use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
