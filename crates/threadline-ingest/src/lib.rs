//! OTLP ingest: request bodies (protobuf, JSON, gzip) → OTLP messages → validated
//! `SpanRecord`s with their normalized LLM view, and `LogRecord`s. Transport-agnostic: the server crate
//! owns sockets and status codes, this crate owns what the bytes mean.

mod body;
mod conversation;
mod convert;
mod export;
#[cfg(test)]
mod fuzz_tests;
mod lenient;
#[cfg(test)]
mod llm_view_tests;
mod logs;
mod otlp_json;
mod time_bounds;
mod traces_wire;
mod wire;

pub use body::{
    decode_body, decode_export, decode_export_request, decode_logs, decode_protobuf, decode_traces,
    BodyLimits, ContentKind, DecodeError, InflateBudget, RpcStatus, Unbudgeted,
};
pub use conversation::{conversation, with_log_events, Conversation, Message, ToolCall};
pub use convert::{convert_request, ConvertedBatch};
pub use export::{any_value, key_values, to_resource_spans};
pub use lenient::{RecordWise, Undecodable};
pub use logs::{convert_logs_request, ConvertedLogs};
pub use otlp_json::parse_otlp_json;
pub use threadline_model::llm_view;
pub use time_bounds::TimeBounds;

/// Re-exported so callers name the exact OTLP message types this crate decodes.
pub use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
pub use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// An OTLP export request this crate decodes.
pub trait ExportRequest:
    prost::Message + Default + serde::de::DeserializeOwned + RecordWise
{
    /// The message's name, for errors.
    const NAME: &'static str;
    /// Its top-level field in OTLP/JSON.
    const ROOT: &'static str;
}

impl ExportRequest for ExportTraceServiceRequest {
    const NAME: &'static str = "ExportTraceServiceRequest";
    const ROOT: &'static str = "resourceSpans";
}

impl ExportRequest for ExportLogsServiceRequest {
    const NAME: &'static str = "ExportLogsServiceRequest";
    const ROOT: &'static str = "resourceLogs";
}
