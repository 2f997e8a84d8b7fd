//! Storage of spans, logs, the lineage graph, rollups and incidents.
//!
//! The rest of the workspace holds a `Store` and calls `StoreBackend`'s operations:
//! typed queries in, model types and typed results out, `StoreError` (a kind and a
//! message, no backend type) on failure. Backends live in their own modules — `sqlite` (the embedded
//! default) and `clickhouse` (for deployments beyond one machine); nothing outside them names SQL, files or columns.

mod ack;
mod backend;
mod clickhouse;
mod dir_lock;
mod erasure;
mod error;
mod log_search;
mod queries;
mod retries;
mod search;
mod skeleton;
mod sqlite;

pub use ack::{Applied, WriteAck, WriterStats};
pub use backend::{
    Bound, ExemplarQuery, OpenSpans, SpanBatch, SpanReader, Store, StoreBackend, WriteComing,
    EXEMPLAR_DIMENSIONS,
};
pub use clickhouse::{
    clickhouse_ddl, ClickHouseConfig, ClickHouseOptions, ClickHouseStore, SpoolStats,
};
pub use erasure::{CopiesErased, ErasureRecord, ErasureReport, ErasureSubject, ERASED};
pub use error::{ErrorKind, StoreError};
pub use log_search::{LogCursor, LogPage, LogQuery, StoredLog};
pub use queries::{RequestsServed, ServiceSummary, WalkLimits};
pub use search::{ModelUsage, NameMatch, TraceCursor, TracePage, TraceQuery, TraceSummary};
pub use skeleton::{SkeletonSpan, SpanLocation};
pub use sqlite::{EmbeddedConfig, SqliteStore, TextIndexConfig, TraceIndexConfig, DB_FILE_NAME};
