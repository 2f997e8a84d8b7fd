//! Trace-level search: each filter holds on some span of the trace (not all on one),
//! free text covers the trace's log records, results come strictly newest trace start
//! first, pages neither repeat nor skip, and the time range is the trace start's.

use crate::StoreBackend as _;
use std::sync::Arc;

use threadline_model::{
    AttrValue, Attribute, LlmView, LogDetail, LogRecord, SpanId, SpanOrigin, TraceId,
};

use crate::sqlite::tests::{acme, span};
use crate::sqlite::{EmbeddedConfig, SqliteStore};
use crate::{TraceCursor, TraceQuery};

const MS: u64 = 1_000_000;

fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    (dir, store)
}

/// A trace: a routed root at `root_ms` and a child named `child_name` at `child_ms`.
fn request(store: &SqliteStore, trace: u8, root_ms: u64, child_ms: u64, child_name: &str) {
    let mut root = span(trace, 1, None, root_ms * MS, None);
    root.llm = Some(LlmView {
        route: Some("/v1/chat".into()),
        ..Default::default()
    });
    let mut child = span(trace, 2, Some(1), child_ms * MS, Some("gpt-4o-mini"));
    child.name = child_name.into();
    child.service = "llm".into();
    store.write_blocking(&acme(), &[root, child]).unwrap();
}

fn ids(store: &SqliteStore, q: TraceQuery) -> Vec<u8> {
    store
        .search(&acme(), &TraceQuery { limit: 50, ..q })
        .unwrap()
        .traces
        .iter()
        .map(|t| t.trace_id.0[0])
        .collect()
}

#[test]
fn filters_hold_per_trace_not_per_span() {
    let (_dir, store) = open();
    request(&store, 1, 1_000, 1_010, "refund request");
    request(&store, 2, 2_000, 2_010, "weather chat");
    // The text is on the LLM span, the route and the service on the root.
    let q = TraceQuery {
        text: Some("refund".into()),
        route: Some("/v1/chat".into()),
        service: Some("gateway".into()),
        ..Default::default()
    };
    assert_eq!(ids(&store, q), [1]);
    // Every filter must still hold somewhere in the trace.
    let q = TraceQuery {
        text: Some("refund".into()),
        route: Some("/v1/other".into()),
        ..Default::default()
    };
    assert!(ids(&store, q).is_empty());
    let q = TraceQuery {
        model: Some("gpt-4o".into()),
        route: Some("/v1/chat".into()),
        ..Default::default()
    };
    assert_eq!(ids(&store, q), [2, 1]);
}

#[test]
fn free_text_covers_the_traces_log_records() {
    let (_dir, store) = open();
    request(&store, 3, 1_000, 1_010, "chat");
    request(&store, 4, 2_000, 2_010, "chat");
    let record = LogRecord {
        time_unix_nano: 1_005 * MS,
        trace_id: Some(TraceId([3; 16])),
        span_id: Some(SpanId([2; 8])),
        service: "llm".into(),
        detail: LogDetail {
            body: AttrValue::String("escalated to a human agent".into()),
            attributes: vec![Attribute::new("event.name", AttrValue::String("x".into()))],
            ..LogDetail::default()
        },
        origin: Arc::new(SpanOrigin::default()),
    };
    let prepared = store.prepare_logs(&acme(), &[record]).unwrap();
    store
        .submit_logs(prepared)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let q = |text: &str| TraceQuery {
        text: Some(text.into()),
        ..Default::default()
    };
    assert_eq!(ids(&store, q("escalated human")), [3]);
    // A log's text and a span's filter combine too.
    let q = TraceQuery {
        text: Some("escalated".into()),
        model: Some("gpt".into()),
        ..Default::default()
    };
    assert_eq!(ids(&store, q), [3]);
}

#[test]
fn results_are_newest_trace_start_first_and_pages_neither_repeat_nor_skip() {
    let (_dir, store) = open();
    // Trace 5 started first but its matching span is the newest of all.
    request(&store, 5, 1_000, 9_000, "match");
    request(&store, 6, 3_000, 3_001, "match");
    request(&store, 7, 5_000, 5_001, "match");
    request(&store, 8, 7_000, 7_001, "other");
    let q = TraceQuery {
        text: Some("match".into()),
        ..Default::default()
    };
    assert_eq!(ids(&store, q.clone()), [7, 6, 5]);
    let mut pages = Vec::new();
    let mut cursor: Option<TraceCursor> = None;
    loop {
        let page = store
            .search(
                &acme(),
                &TraceQuery {
                    limit: 1,
                    cursor,
                    ..q.clone()
                },
            )
            .unwrap();
        pages.extend(page.traces.iter().map(|t| t.trace_id.0[0]));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, [7, 6, 5]);
    // The range is the trace start's: trace 5 started before it.
    let q = TraceQuery {
        start_from_unix_nano: Some(2_000 * MS),
        ..q
    };
    assert_eq!(ids(&store, q), [7, 6]);
    // Without filters: every trace, newest start first.
    assert_eq!(ids(&store, TraceQuery::default()), [8, 7, 6, 5]);
}
