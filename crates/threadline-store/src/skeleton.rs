//! Skeleton spans: what a trace view needs of each span before it opens any whole
//! (`SpanReader`), and where the rest is.

use threadline_model::{SpanId, SpanKind};

/// What a trace view needs of a span before it is opened.
#[derive(Clone, Debug, PartialEq)]
pub struct SkeletonSpan {
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub name: String,
    pub service: String,
    pub kind: SpanKind,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub error: bool,
    /// The requested (else responding) model of an LLM span.
    pub model: Option<String>,
    pub total_tokens: Option<i64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    /// The conversation and end user the span names.
    pub session_id: Option<String>,
    pub user_id: Option<String>,
    /// Where the rest of the span is, for `SpanReader::span`.
    pub location: SpanLocation,
}

impl SkeletonSpan {
    /// The session and the user of a trace: the earliest of `spans` naming each.
    pub fn session_and_user(spans: &[SkeletonSpan]) -> (Option<&String>, Option<&String>) {
        let first = |get: fn(&SkeletonSpan) -> Option<&String>| {
            spans
                .iter()
                .filter(|s| get(s).is_some())
                .min_by_key(|s| s.start_time_unix_nano)
                .and_then(get)
        };
        (
            first(|s| s.session_id.as_ref()),
            first(|s| s.user_id.as_ref()),
        )
    }
}

/// Where a span's full record is stored: opaque outside the store, each backend
/// reading its own kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanLocation(pub(crate) Located);

/// A location that names no stored span (skeletons built by hand, in tests).
impl Default for SpanLocation {
    fn default() -> Self {
        Self(Located::Embedded {
            block_id: 0,
            offset: 0,
            len: 0,
            origin_hash: 0,
        })
    }
}

/// A `SpanLocation` per backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Located {
    /// The embedded store: the span's slot in its detail block, and its origin.
    Embedded {
        block_id: i64,
        offset: u32,
        len: u32,
        origin_hash: i64,
    },
    /// A backend that reads a span by its ids (ClickHouse): nothing more to keep.
    ById,
}

impl SpanLocation {
    /// The location of a span read back by its ids.
    pub(crate) fn remote() -> Self {
        Self(Located::ById)
    }
}
