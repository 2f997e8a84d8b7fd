//! Storage of spans, logs, the lineage graph, rollups and incidents.
//!
//! The rest of the workspace holds a `Store` and calls `StoreBackend`'s operations:
//! typed queries in, model types and typed results out, `StoreError` (a kind and a
//! message, no backend type) on failure. Backends live in their own modules — today
//! `sqlite` (the embedded default); nothing outside them names SQL, files or columns.

mod backend;
mod error;
mod retries;
mod sqlite;

pub use backend::{
    Bound, ExemplarQuery, OpenSpans, SpanReader, Store, StoreBackend, EXEMPLAR_DIMENSIONS,
};
pub use error::{ErrorKind, StoreError};
pub use sqlite::{
    Applied, CopiesErased, EmbeddedConfig, ErasureRecord, ErasureReport, ErasureSubject, LogCursor,
    LogPage, LogQuery, ModelUsage, NameMatch, RequestsServed, ServiceSummary, SkeletonSpan,
    SpanLocation, SqliteStore, StoredLog, TextIndexConfig, TraceCursor, TraceIndexConfig,
    TracePage, TraceQuery, TraceSummary, WalkLimits, WriteAck, WriterStats, DB_FILE_NAME, ERASED,
};
