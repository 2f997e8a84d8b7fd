//! Typed core types of Threadline. Everything past the ingest edge speaks these types:
//! ids are fixed-size arrays, times are `_unix_nano` integers, attribute values are an
//! enum, and the normalized LLM view is a struct of typed optional fields.
//!
//! Types that are persisted by the embedded store derive `serde` (the store encodes
//! them with postcard); API shapes are written as DTOs in the server crate.

pub mod conventions;
mod ids;
mod lineage;
mod llm;
mod log;
mod span;
mod text;
pub mod trace_tree;

pub use conventions::{llm_view, llm_view_but_prompt_hash};
pub use ids::{IdError, SpanId, TenantId, TraceId};
pub use lineage::{
    AssetOutcome, AssetRegistration, DeclaredEdge, DeclaredValidity, Direction, EdgeEnd, EdgeKind,
    EdgeUpsert, GraphUpdate, LineageEdge, LineageEventKey, LineageGraph, LineageNode, NodeId,
    NodeIdError, NodeKind, NodeUpsert, RunState, RunTransition, UnknownNodeKind,
};
pub use llm::{model_family, LlmView, RejectionReason};
pub use log::{severity_from_name, severity_name, LogDetail, LogRecord};
pub use span::{
    AttrValue, Attribute, InstrumentationScope, SpanDetail, SpanEvent, SpanKind, SpanLink,
    SpanOrigin, SpanRecord, SpanStatus, StatusCode,
};
pub use text::{for_each_string, is_text_event, is_text_key};
