//! Tests of the embedded store against a real database file.

use std::collections::HashSet;
use std::sync::Arc;

use threadline_model::{
    AttrValue, Attribute, LlmView, SpanDetail, SpanId, SpanKind, SpanOrigin, SpanRecord,
    SpanStatus, StatusCode, TenantId, TraceId,
};

use super::*;
use crate::ModelUsage;

fn origin(service: &str) -> Arc<SpanOrigin> {
    Arc::new(SpanOrigin {
        resource_attributes: vec![Attribute::new(
            "service.name",
            AttrValue::String(service.into()),
        )],
        ..Default::default()
    })
}

pub(crate) fn span(
    trace: u8,
    span: u8,
    parent: Option<u8>,
    start: u64,
    model: Option<&str>,
) -> SpanRecord {
    SpanRecord {
        trace_id: TraceId([trace; 16]),
        span_id: SpanId([span; 8]),
        parent_span_id: parent.map(|p| SpanId([p; 8])),
        name: format!("span-{span}"),
        service: "gateway".into(),
        kind: SpanKind::Server,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1_000_000,
        detail: SpanDetail {
            trace_state: String::new(),
            flags: 1,
            attributes: vec![
                Attribute::new(
                    "tier",
                    AttrValue::String(
                        if trace.is_multiple_of(2) {
                            "gold"
                        } else {
                            "free"
                        }
                        .into(),
                    ),
                ),
                Attribute::new(
                    "prompt",
                    AttrValue::String("tell me about the weather ".repeat(20)),
                ),
            ],
            dropped_attributes_count: 0,
            events: vec![],
            dropped_events_count: 0,
            links: vec![],
            dropped_links_count: 0,
            status: SpanStatus {
                code: if span == 9 {
                    StatusCode::Error
                } else {
                    StatusCode::Unset
                },
                message: String::new(),
            },
        },
        origin: origin("gateway"),
        llm: model.map(|m| LlmView {
            request_model: Some(m.into()),
            input_tokens: Some(10),
            output_tokens: Some(5),
            total_tokens: Some(15),
            ..Default::default()
        }),
    }
}

fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    (dir, store)
}

pub(crate) fn acme() -> TenantId {
    TenantId::new("acme").unwrap()
}

#[test]
fn trace_round_trips_faithfully() {
    let (_dir, store) = open();
    let spans = vec![
        span(1, 1, None, 100, None),
        span(1, 2, Some(1), 200, Some("gpt-4")),
    ];
    store.write_blocking(&acme(), &spans).unwrap();
    let back = store.get_trace(&acme(), TraceId([1; 16])).unwrap();
    assert_eq!(back, spans);
}

#[test]
fn tenants_never_see_each_other() {
    let (_dir, store) = open();
    store
        .write_blocking(&acme(), &[span(1, 1, None, 100, None)])
        .unwrap();
    let other = TenantId::new("globex").unwrap();
    store
        .write_blocking(&other, &[span(2, 1, None, 100, None)])
        .unwrap();
    assert!(store
        .get_trace(&other, TraceId([1; 16]))
        .unwrap()
        .is_empty());
    let page = store
        .search(
            &other,
            &TraceQuery {
                limit: 10,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.traces.len(), 1);
    assert_eq!(page.traces[0].trace_id, TraceId([2; 16]));
}

#[test]
fn search_pages_cover_every_trace_once_newest_first() {
    let (_dir, store) = open();
    let mut spans = Vec::new();
    for t in 1..=25u8 {
        // Several traces share start times, and each has an older matching child.
        let start = 1_000 + (t as u64 / 3) * 10;
        spans.push(span(t, 1, None, start, None));
        spans.push(span(t, 2, Some(1), start - 500, Some("llama")));
    }
    store.write_blocking(&acme(), &spans).unwrap();
    let mut seen = Vec::new();
    let mut query = TraceQuery {
        limit: 4,
        ..Default::default()
    };
    loop {
        let page = store.search(&acme(), &query).unwrap();
        seen.extend(
            page.traces
                .iter()
                .map(|t| (t.start_time_unix_nano, t.trace_id)),
        );
        match page.next_cursor {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 25);
    let unique: HashSet<_> = seen.iter().map(|(_, id)| *id).collect();
    assert_eq!(unique.len(), 25);
    assert!(
        seen.windows(2).all(|w| w[0].0 >= w[1].0),
        "newest first: {seen:?}"
    );
}

/// Spans reach the store out of start order, so the time zones of blocks overlap: a
/// search must still page through traces strictly newest first (by the trace's start,
/// ties by trace id descending), each trace once, whatever the filters — each of them
/// holding on some span of the trace.
#[test]
fn search_merges_blocks_whose_times_overlap() {
    let (_dir, store) = open();
    let other = TenantId::new("globex").unwrap();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    // 60 traces of 3 spans; starts on a coarse grid so traces tie; the spans of a
    // trace go to different blocks, in shuffled order.
    let mut spans: Vec<SpanRecord> = Vec::new();
    for t in 1..=60u8 {
        let root = 10_000 + next(40) * 100;
        let model = ["llama", "gpt-4"][next(2) as usize];
        spans.push(span(t, 1, None, root, None));
        spans.push(span(t, 2, Some(1), root + next(5) * 100, Some(model)));
        let id = if next(4) == 0 { 9 } else { 3 };
        spans.push(span(t, id, Some(1), root + next(5) * 100, None));
    }
    for i in (1..spans.len()).rev() {
        let j = next(i as u64 + 1) as usize;
        spans.swap(i, j);
    }
    for (n, chunk) in spans.chunks(7).enumerate() {
        store.write_blocking(&acme(), chunk).unwrap();
        // Another tenant's newer spans between acme's blocks must never show.
        let newer = span(
            200 + (n % 50) as u8,
            1,
            None,
            90_000 + n as u64,
            Some("llama"),
        );
        store.write_blocking(&other, &[newer]).unwrap();
    }

    // Each predicate holds on some span of the trace; newest trace start first (its
    // earliest span), ties by trace id descending; a range bounds the trace's start.
    type Holds<'a> = &'a dyn Fn(&SpanRecord) -> bool;
    let expected = |predicates: &[Holds<'_>], range: Option<(u64, u64)>| -> Vec<(u64, TraceId)> {
        let mut traces: std::collections::HashMap<TraceId, Vec<&SpanRecord>> = Default::default();
        for s in &spans {
            traces.entry(s.trace_id).or_default().push(s);
        }
        let mut order: Vec<(u64, TraceId)> = traces
            .into_iter()
            .filter(|(_, ss)| predicates.iter().all(|p| ss.iter().any(|s| p(s))))
            .map(|(t, ss)| (ss.iter().map(|s| s.start_time_unix_nano).min().unwrap(), t))
            .filter(|(start, _)| range.is_none_or(|(from, to)| (from..=to).contains(start)))
            .collect();
        order.sort_by_key(|&(at, trace)| std::cmp::Reverse((at, trace.0)));
        order
    };
    let paged = |query: TraceQuery| -> Vec<TraceId> {
        let mut query = TraceQuery { limit: 4, ..query };
        let mut seen = Vec::new();
        loop {
            let page = store.search(&acme(), &query).unwrap();
            seen.extend(page.traces.iter().map(|t| t.trace_id));
            match page.next_cursor {
                Some(c) => query.cursor = Some(c),
                None => return seen,
            }
        }
    };
    let ids = |order: Vec<(u64, TraceId)>| order.into_iter().map(|(_, t)| t).collect::<Vec<_>>();

    assert_eq!(paged(TraceQuery::default()), ids(expected(&[], None)));
    let llama = |s: &SpanRecord| {
        s.llm
            .as_ref()
            .is_some_and(|l| l.request_model.as_deref() == Some("llama"))
    };
    assert_eq!(
        paged(TraceQuery {
            model: Some("llama".into()),
            ..Default::default()
        }),
        ids(expected(&[&llama], None))
    );
    let failed = |s: &SpanRecord| s.detail.status.code == StatusCode::Error;
    assert_eq!(
        paged(TraceQuery {
            errors_only: true,
            ..Default::default()
        }),
        ids(expected(&[&failed], None))
    );
    let gold = |s: &SpanRecord| s.trace_id.0[0].is_multiple_of(2);
    assert_eq!(
        paged(TraceQuery {
            attributes: vec![("tier".into(), "gold".into())],
            model: Some("gpt-4".into()),
            ..Default::default()
        }),
        ids(expected(&[&gold, &|s| s.llm.is_some() && !llama(s)], None))
    );
    assert_eq!(
        paged(TraceQuery {
            start_from_unix_nano: Some(11_000),
            start_to_unix_nano: Some(13_000),
            ..Default::default()
        }),
        ids(expected(&[], Some((11_000, 13_000))))
    );
    let errors = expected(&[&failed], None);
    assert!(!errors.is_empty() && errors.len() < 60);
}

/// Time-window reads (requests served by an adapter or instance since a time; the
/// slowest spans of a window) see exactly the spans of the window, across blocks,
/// through a column index or a block's row range.
#[test]
fn window_reads_count_only_spans_of_the_window() {
    let (_dir, store) = open();
    let served = |t: u8, start: u64, adapter: Option<&str>, instance: &str| {
        let mut s = span(t, 2, None, start, Some("llama"));
        let llm = s.llm.as_mut().unwrap();
        llm.adapter_id = adapter.map(str::to_owned);
        llm.instance_id = Some(instance.to_owned());
        s.end_time_unix_nano = start + u64::from(t) * 1_000;
        s
    };
    // Blocks out of time order: 4 traces before 5,000 ns, 6 after.
    store
        .write_blocking(
            &acme(),
            &[
                served(1, 6_000, Some("lora-a"), "i-1"),
                served(2, 1_000, Some("lora-a"), "i-1"),
            ],
        )
        .unwrap();
    store
        .write_blocking(
            &acme(),
            &[
                served(3, 2_000, Some("lora-a"), "i-2"),
                served(4, 7_000, None, "i-2"),
                served(5, 8_000, Some("lora-b"), "i-1"),
            ],
        )
        .unwrap();
    store
        .write_blocking(
            &acme(),
            &[
                served(6, 9_000, Some("lora-a"), "i-2"),
                served(7, 3_000, None, "i-1"),
                served(8, 5_500, Some("lora-a"), "i-3"),
                served(9, 4_000, None, "i-3"),
                served(10, 9_500, None, "i-3"),
            ],
        )
        .unwrap();
    let got = store
        .requests_served(&acme(), &["lora-a".into()], &["i-3".into()], 5_000)
        .unwrap();
    // After 5,000: lora-a on 1, 6, 8; i-3 on 8, 10.
    assert_eq!(got.traces, 4, "{got:?}");
    assert_eq!(
        got.by_node,
        vec![
            (NodeId::new(NodeKind::Adapter, "lora-a"), 3),
            (NodeId::new(NodeKind::Instance, "i-3"), 2)
        ]
    );
    let slowest = |filters: Vec<(threadline_analysis::Dimension, String)>| -> Vec<TraceId> {
        store
            .exemplars(
                &acme(),
                &ExemplarQuery {
                    filters,
                    from_ns: 2_000,
                    to_ns: 7_000,
                    limit: 3,
                    ..Default::default()
                },
            )
            .unwrap()
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    };
    // Within 2,000..=7,000: traces 1, 3, 4, 7, 8, 9; slowest is the highest number.
    assert_eq!(
        slowest(vec![]),
        vec![TraceId([9; 16]), TraceId([8; 16]), TraceId([7; 16])]
    );
    assert_eq!(
        slowest(vec![(
            threadline_analysis::Dimension::Adapter,
            "lora-a".into()
        )]),
        vec![TraceId([8; 16]), TraceId([3; 16]), TraceId([1; 16])]
    );
}

#[test]
fn filters_narrow_the_search() {
    let (_dir, store) = open();
    store
        .write_blocking(
            &acme(),
            &[
                span(1, 1, None, 100, Some("gpt-4")),
                span(2, 1, None, 200, Some("llama")),
                span(3, 9, None, 300, None),
            ],
        )
        .unwrap();
    let search = |q: TraceQuery| -> Vec<TraceId> {
        store
            .search(&acme(), &TraceQuery { limit: 10, ..q })
            .unwrap()
            .traces
            .into_iter()
            .map(|t| t.trace_id)
            .collect()
    };
    assert_eq!(
        search(TraceQuery {
            model: Some("llama".into()),
            ..Default::default()
        }),
        vec![TraceId([2; 16])]
    );
    assert_eq!(
        search(TraceQuery {
            errors_only: true,
            ..Default::default()
        }),
        vec![TraceId([3; 16])]
    );
    assert_eq!(
        search(TraceQuery {
            attributes: vec![("tier".into(), "gold".into())],
            ..Default::default()
        }),
        vec![TraceId([2; 16])]
    );
    assert_eq!(
        search(TraceQuery {
            attributes: vec![("service.name".into(), "gateway".into())],
            ..Default::default()
        })
        .len(),
        3
    );
    assert_eq!(
        search(TraceQuery {
            start_to_unix_nano: Some(150),
            ..Default::default()
        }),
        vec![TraceId([1; 16])]
    );
    let summary = &store
        .search(
            &acme(),
            &TraceQuery {
                limit: 10,
                model: Some("gpt-4".into()),
                ..Default::default()
            },
        )
        .unwrap()
        .traces[0];
    assert_eq!(summary.total_tokens, 15);
    assert_eq!(summary.models, vec!["gpt-4".to_owned()]);
}

#[test]
fn data_survives_reopen_and_retries_do_not_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
        let spans = [span(1, 1, None, 100, None)];
        store.write_blocking(&acme(), &spans).unwrap();
        store.write_blocking(&acme(), &spans).unwrap();
    }
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    assert_eq!(store.get_trace(&acme(), TraceId([1; 16])).unwrap().len(), 1);
    assert_eq!(
        store.services(&acme()).unwrap(),
        vec![ServiceSummary {
            name: "gateway".into()
        }]
    );
}

#[test]
fn rollups_cover_every_acked_span_and_are_rebuilt_after_a_lost_flush() {
    let dir = tempfile::tempdir().unwrap();
    let minute = 29_000_000i64;
    let at = |s: i64| ((minute * 60 + s) * 1_000_000_000) as u64;
    let requests: Vec<SpanRecord> = (0..30u8)
        .map(|i| span(i, i, None, at(i64::from(i)), Some("llama-3")))
        .collect();
    {
        let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
        store.write_blocking(&acme(), &requests[..20]).unwrap();
        store.write_blocking(&acme(), &requests[20..]).unwrap();
        // Not a request: no LLM view.
        store
            .write_blocking(&acme(), &[span(99, 1, None, at(5), None)])
            .unwrap();
        store.flush_rollups().unwrap().wait_blocking().unwrap();
        let cells = store.rollup_cells(&acme(), minute, minute).unwrap();
        assert_eq!(cells.len(), 1);
        let (m, key, cell) = &cells[0];
        assert_eq!(*m, minute);
        assert_eq!(key.get(threadline_analysis::Dimension::Model), "llama-3");
        assert_eq!((cell.requests, cell.output_tokens), (30, 150));
        assert!(store
            .rollup_cells(&TenantId::new("globex").unwrap(), minute, minute)
            .unwrap()
            .is_empty());
    }
    // A crash after the spans' commit but before their rollups were flushed: the
    // rollups and the mark are as they were before.
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    conn.execute_batch("DELETE FROM rollups; DELETE FROM store_marks;")
        .unwrap();
    drop(conn);
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let cells = store.rollup_cells(&acme(), minute, minute).unwrap();
    assert_eq!(cells.len(), 1);
    assert_eq!(cells[0].2.requests, 30);
    // Replayed once: reopening does not count the spans again.
    drop(store);
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    assert_eq!(
        store.rollup_cells(&acme(), minute, minute).unwrap()[0]
            .2
            .requests,
        30
    );
}

/// A retried export (the same trace and span ids) is stored again — readers show the
/// first copy — but its requests are rolled up once, also when the retry comes after a
/// restart; a batch the queue refused counts when it is sent again.
#[test]
fn a_retried_export_is_rolled_up_once_even_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let minute = 29_000_000i64;
    let at = |s: i64| ((minute * 60 + s) * 1_000_000_000) as u64;
    let batch: Vec<SpanRecord> = (0..10u8)
        .map(|i| span(i, i, None, at(i64::from(i)), Some("llama-3")))
        .collect();
    let requests = |store: &SqliteStore| -> u64 {
        store.flush_rollups().unwrap().wait_blocking().unwrap();
        store
            .rollup_cells(&acme(), minute, minute)
            .unwrap()
            .iter()
            .map(|(_, _, c)| c.requests)
            .sum()
    };
    {
        let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
        store.write_blocking(&acme(), &batch).unwrap();
        store.write_blocking(&acme(), &batch).unwrap();
        assert_eq!(requests(&store), 10);
        // Half new, half repeated: the new half counts.
        let mixed: Vec<SpanRecord> = (5..15u8)
            .map(|i| span(i, i, None, at(i64::from(i)), Some("llama-3")))
            .collect();
        store.write_blocking(&acme(), &mixed).unwrap();
        assert_eq!(requests(&store), 15);
    }
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    store.write_blocking(&acme(), &batch).unwrap();
    assert_eq!(requests(&store), 15, "the window is rebuilt at open");
    // Another tenant's spans with the same ids are its own.
    let globex = TenantId::new("globex").unwrap();
    store.write_blocking(&globex, &batch).unwrap();
    store.flush_rollups().unwrap().wait_blocking().unwrap();
    let theirs: u64 = store
        .rollup_cells(&globex, minute, minute)
        .unwrap()
        .iter()
        .map(|(_, _, c)| c.requests)
        .sum();
    assert_eq!(theirs, 10);
}

/// A store from before migration 17 counted a request on its model call: its cells
/// are dropped and recomputed from the stored spans at open, a route's request on its
/// entry span (whole, with the time of each part) beside the model call.
#[test]
fn migration_17_recomputes_the_rollups_at_both_levels() {
    use threadline_analysis::{Dimension, Level};
    let dir = tempfile::tempdir().unwrap();
    let minute = 29_000_000i64;
    let start = (minute * 60 * 1_000_000_000) as u64;
    let mut gateway = span(1, 1, None, start, None);
    gateway.end_time_unix_nano = start + 900_000_000;
    gateway.llm = Some(LlmView {
        route: Some("/v1/chat".into()),
        ..LlmView::default()
    });
    let mut call = span(1, 2, Some(1), start + 100_000_000, Some("llama-3"));
    call.service = "vllm".into();
    call.end_time_unix_nano = start + 800_000_000;
    {
        let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
        store.write_blocking(&acme(), &[gateway, call]).unwrap();
        store.flush_rollups().unwrap().wait_blocking().unwrap();
    }
    // As a version-16 store left them: a series key of the old shape, a cell it wrote.
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).unwrap();
    conn.execute_batch(
        r#"DELETE FROM rollups; DELETE FROM rollup_series;
           INSERT INTO rollup_series (id, tenant_id, dims) VALUES (77, 1, '["vllm","/v1/chat","llama-3"]');
           INSERT INTO rollups (tenant_id, minute, series_id, cell) VALUES (1, 29000000, 77, x'0102');
           UPDATE store_marks SET value = 999 WHERE name = 'rollups_through_block';
           DROP TABLE trace_run_filters;
           ALTER TABLE graph_edges DROP COLUMN declared;
           ALTER TABLE graph_edges DROP COLUMN valid_from_ns;
           ALTER TABLE graph_edges DROP COLUMN superseded_ns;
           DROP TABLE block_sessions;
           DROP TABLE service_hops;
           PRAGMA user_version = 16;"#,
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let cells = store.rollup_cells(&acme(), minute, minute).unwrap();
    assert_eq!(cells.len(), 2, "{cells:?}");
    let at = |level| {
        cells
            .iter()
            .find(|(_, k, _)| k.level() == level)
            .unwrap_or_else(|| panic!("no {level:?} cell"))
    };
    let (_, request, cell) = at(Level::Request);
    assert_eq!(
        (
            request.get(Dimension::Service),
            request.get(Dimension::Model)
        ),
        ("gateway", "llama-3")
    );
    let p50 = cell.latency_ms.quantile(0.5).unwrap().unwrap();
    assert!((p50 - 900.0).abs() < 10.0, "{p50}");
    assert_eq!(cell.span_time.len(), 2);
    let (_, call_key, call_cell) = at(Level::Call);
    assert_eq!(call_key.get(Dimension::Route), "/v1/chat");
    let p50 = call_cell.latency_ms.quantile(0.5).unwrap().unwrap();
    assert!((p50 - 700.0).abs() < 8.0, "{p50}");
}

/// A run that wrote a version of an artifact dataset produced the asset claiming it,
/// whichever came first; inputs without a version read the newest version.
#[test]
fn artifact_claims_join_runs_in_either_order_and_inputs_read_the_newest_version() {
    use threadline_model::{EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate, NodeId, NodeUpsert};
    let (_dir, store) = open();
    let id = |s: &str| -> NodeId { s.parse().unwrap() };
    let edge = |src: EdgeEnd, dst: &str, kind, seen_ns| EdgeUpsert {
        declared: None,
        src,
        dst: EdgeEnd::Node(id(dst)),
        kind,
        seen_ns,
        evidence: serde_json::Value::Null,
    };
    let node = |n: &str, seen_ns| NodeUpsert {
        id: id(n),
        seen_ns,
        props: serde_json::json!({}),
    };
    let apply = |update: GraphUpdate| {
        store
            .write_graph(&acme(), update, 0)
            .unwrap()
            .wait_blocking()
            .unwrap();
    };
    // Claim first (adapter a1 on dataset s3:m/a1), then a run writes a version of it.
    // Event first for a2: a run writes s3:m/a2 v1, later the adapter claims it.
    apply(GraphUpdate {
        edges: vec![edge(
            EdgeEnd::Node(id("dataset:s3:m/a1")),
            "adapter:a1",
            EdgeKind::ArtifactOf,
            10,
        )],
        ..Default::default()
    });
    for (run, dataset, version, t) in [
        (
            "run:r1",
            "dataset:s3:m/a1",
            "dataset_version:s3:m/a1@v1",
            20,
        ),
        (
            "run:r2",
            "dataset:s3:m/a2",
            "dataset_version:s3:m/a2@v1",
            30,
        ),
        (
            "run:r3",
            "dataset:s3:m/a2",
            "dataset_version:s3:m/a2@v2",
            40,
        ),
    ] {
        apply(GraphUpdate {
            nodes: vec![node(run, t), node(version, t)],
            edges: vec![
                edge(EdgeEnd::Node(id(dataset)), version, EdgeKind::HasVersion, t),
                edge(EdgeEnd::Node(id(run)), version, EdgeKind::Produced, t),
            ],
            ..Default::default()
        });
    }
    apply(GraphUpdate {
        edges: vec![
            edge(
                EdgeEnd::Node(id("dataset:s3:m/a2")),
                "adapter:a2",
                EdgeKind::ArtifactOf,
                50,
            ),
            // Read without a version facet: the newest version (v2).
            edge(
                EdgeEnd::CurrentVersionOf(id("dataset:s3:m/a2")),
                "run:r9",
                EdgeKind::InputTo,
                60,
            ),
        ],
        ..Default::default()
    });
    // A version written after the claim joins too (the writer had remembered the
    // dataset as unclaimed while it wrote v1 and v2).
    apply(GraphUpdate {
        nodes: vec![node("run:r4", 70), node("dataset_version:s3:m/a2@v3", 70)],
        edges: vec![
            edge(
                EdgeEnd::Node(id("dataset:s3:m/a2")),
                "dataset_version:s3:m/a2@v3",
                EdgeKind::HasVersion,
                70,
            ),
            edge(
                EdgeEnd::Node(id("run:r4")),
                "dataset_version:s3:m/a2@v3",
                EdgeKind::Produced,
                70,
            ),
        ],
        ..Default::default()
    });
    let graph = store.graph_dump(&acme(), 1000).unwrap().unwrap();
    let has = |src: &str, kind: EdgeKind, dst: &str| {
        graph
            .edges
            .iter()
            .any(|e| e.src == id(src) && e.kind == kind && e.dst == id(dst))
    };
    assert!(has("run:r1", EdgeKind::Produced, "adapter:a1"), "{graph:?}");
    assert!(has("run:r2", EdgeKind::Produced, "adapter:a2"));
    assert!(has("run:r3", EdgeKind::Produced, "adapter:a2"));
    assert!(has("run:r4", EdgeKind::Produced, "adapter:a2"));
    assert!(!has("run:r1", EdgeKind::Produced, "adapter:a2"));
    assert!(has(
        "dataset_version:s3:m/a2@v2",
        EdgeKind::InputTo,
        "run:r9"
    ));
}

/// A new version's drift is against the version before it, whether that version's
/// profile is remembered by this process or read back from the store after a reopen;
/// a version written out of order is compared with the one before it in time.
#[test]
fn drift_compares_with_the_previous_version_before_and_after_a_reopen() {
    use threadline_model::{EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate, NodeId, NodeUpsert};
    let dir = tempfile::tempdir().unwrap();
    let id = |s: &str| -> NodeId { s.parse().unwrap() };
    let version = |v: &str, rows: u64, t: i64| GraphUpdate {
        nodes: vec![NodeUpsert {
            id: id(&format!("dataset_version:wh:t@{v}")),
            seen_ns: t,
            props: serde_json::json!({"facets": {"dataQualityMetrics": {"rowCount": rows}}}),
        }],
        edges: vec![EdgeUpsert {
            declared: None,
            src: EdgeEnd::Node(id("dataset:wh:t")),
            dst: EdgeEnd::Node(id(&format!("dataset_version:wh:t@{v}"))),
            kind: EdgeKind::HasVersion,
            seen_ns: t,
            evidence: serde_json::Value::Null,
        }],
        ..Default::default()
    };
    let drift_of = |store: &SqliteStore, v: &str| {
        let node = store
            .get_node(&acme(), &id(&format!("dataset_version:wh:t@{v}")))
            .unwrap()
            .unwrap();
        node.props.get("drift").cloned()
    };
    let apply = |store: &SqliteStore, update| {
        store
            .write_graph(&acme(), update, 0)
            .unwrap()
            .wait_blocking()
            .unwrap();
    };
    {
        let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
        apply(&store, version("v1", 1000, 10));
        apply(&store, version("v2", 1100, 20));
        apply(&store, version("v3", 5000, 30));
        assert_eq!(drift_of(&store, "v1"), None);
        assert_eq!(
            drift_of(&store, "v2"),
            None,
            "1,000 → 1,100 rows is no drift"
        );
        let drift = drift_of(&store, "v3").expect("1,100 → 5,000 rows drifted");
        assert_eq!(drift["previous_version"], "dataset_version:wh:t@v2");
        assert_eq!(drift["changes"][0]["kind"], "row_count");
    }
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    // v3's profile is read back from the store now.
    apply(&store, version("v4", 5100, 40));
    assert_eq!(
        drift_of(&store, "v4"),
        None,
        "5,000 → 5,100 rows is no drift"
    );
    apply(&store, version("v5", 100, 50));
    let drift = drift_of(&store, "v5").expect("5,100 → 100 rows drifted");
    assert_eq!(drift["previous_version"], "dataset_version:wh:t@v4");
    // Written late, between v1 and v2 in time: compared with v1.
    apply(&store, version("v1b", 9000, 15));
    let drift = drift_of(&store, "v1b").expect("1,000 → 9,000 rows drifted");
    assert_eq!(drift["previous_version"], "dataset_version:wh:t@v1");
}

/// While a batch is being prepared, the writer waits for it before committing what
/// is queued (group commit under load); with none in preparation it commits at once.
#[test]
fn a_commit_waits_for_batches_in_preparation_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig {
        group_commit_wait: std::time::Duration::from_secs(600),
        ..EmbeddedConfig::default()
    };
    let store = SqliteStore::open(dir.path(), config).unwrap();
    let batch = |n: u8| {
        let spans = [span(n, 1, None, 1_000 + u64::from(n), None)];
        store.prepare(&acme(), &spans, &mut Vec::new()).unwrap()
    };
    let commits = || store.inner.writer.stats().commits;
    // Nothing in preparation: committed without waiting (the wait is 10 minutes).
    let before = commits();
    store.submit(batch(1)).unwrap().wait_blocking().unwrap();
    assert_eq!(commits(), before + 1);
    // A batch in preparation holds the commit of the one queued before it.
    let preparing = store.inner.writer.preparing();
    let first = store.submit(batch(2)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        commits(),
        before + 1,
        "committed while a batch was in preparation"
    );
    let second = store.submit(batch(3)).unwrap();
    drop(preparing);
    first.wait_blocking().unwrap();
    second.wait_blocking().unwrap();
    assert_eq!(commits(), before + 2, "both batches in one commit");
}

/// With the writer never idle (batches always queued), the WAL must still start over
/// from its beginning now and then, so its file stays a fraction of what was written.
#[test]
fn the_wal_starts_over_under_continuous_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig {
        wal_restart_bytes: 256 * 1024,
        max_spans_per_commit: 100,
        ..EmbeddedConfig::default()
    };
    let store = SqliteStore::open(dir.path(), config).unwrap();
    // Attribute text that zstd cannot shrink much, so encoded bytes track the input.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut noise = |len: usize| -> String {
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'a' + (state % 26) as u8)
            })
            .collect()
    };
    let mut acks = Vec::new();
    let mut written = 0;
    for batch in 0..64u32 {
        let spans: Vec<SpanRecord> = (0..100u32)
            .map(|i| {
                let mut s = span(1, 1, None, u64::from(batch * 100 + i), None);
                s.trace_id = TraceId([(batch % 251) as u8 + 1; 16]);
                s.span_id = SpanId((u64::from(batch) << 32 | u64::from(i) | 1).to_be_bytes());
                s.detail.attributes =
                    vec![Attribute::new("payload", AttrValue::String(noise(1024)))];
                s
            })
            .collect();
        written += 100 * 1024;
        let prepared = store.prepare(&acme(), &spans, &mut Vec::new()).unwrap();
        acks.push(store.submit(prepared).unwrap());
    }
    for ack in acks {
        ack.wait_blocking().unwrap();
    }
    let wal = std::fs::metadata(dir.path().join("threadline.db-wal"))
        .unwrap()
        .len() as usize;
    assert!(written > 4 * 1024 * 1024, "only {written} bytes written");
    assert!(
        wal < written / 2,
        "the WAL grew to {wal} bytes for {written} bytes written"
    );
}

#[test]
fn skeleton_and_single_span_reads_match_the_whole_trace() {
    let (_dir, store) = open();
    let mut spans = vec![
        span(4, 1, None, 1_000, None),
        span(4, 2, Some(1), 2_000, Some("gpt-4o")),
        span(4, 9, Some(1), 3_000, Some("llama")),
    ];
    spans[2].llm.as_mut().unwrap().output_tokens = Some(7);
    store.write_blocking(&acme(), &spans).unwrap();
    // A retried export: still one copy of each span.
    store.write_blocking(&acme(), &spans[1..2]).unwrap();
    let skeleton = store.trace_skeleton(&acme(), TraceId([4; 16])).unwrap();
    let ids: Vec<SpanId> = skeleton.iter().map(|s| s.span_id).collect();
    assert_eq!(ids, [SpanId([1; 8]), SpanId([2; 8]), SpanId([9; 8])]);
    assert_eq!(skeleton[1].parent_span_id, Some(SpanId([1; 8])));
    assert_eq!(skeleton[1].model.as_deref(), Some("gpt-4o"));
    assert_eq!(
        (skeleton[2].error, skeleton[2].output_tokens),
        (true, Some(7))
    );
    let one = store
        .get_span(&acme(), TraceId([4; 16]), SpanId([9; 8]))
        .unwrap()
        .unwrap();
    assert_eq!(one, spans[2]);
    assert!(store
        .get_span(&acme(), TraceId([4; 16]), SpanId([3; 8]))
        .unwrap()
        .is_none());
    let other = TenantId::new("other").unwrap();
    assert!(store
        .trace_skeleton(&other, TraceId([4; 16]))
        .unwrap()
        .is_empty());
    assert!(store
        .get_span(&other, TraceId([4; 16]), SpanId([9; 8]))
        .unwrap()
        .is_none());
    // The summary carries tokens per model for pricing, and the session / text filters.
    let page = store
        .search(
            &acme(),
            &TraceQuery {
                text: Some("SPAN-9".into()),
                limit: 5,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(page.traces.len(), 1);
    let mut usage = page.traces[0].usage.clone();
    usage.sort_by(|a, b| a.model.cmp(&b.model));
    assert_eq!(
        usage,
        [
            ModelUsage {
                model: "gpt-4o".into(),
                input_tokens: 10,
                output_tokens: 5
            },
            ModelUsage {
                model: "llama".into(),
                input_tokens: 10,
                output_tokens: 7
            }
        ]
    );
    let none = store
        .search(
            &acme(),
            &TraceQuery {
                session_id: Some("s-1".into()),
                limit: 5,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(none.traces.is_empty());
}
