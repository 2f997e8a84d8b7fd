//! The store's contract, stated once: what every backend behind `Store` does —
//! writes and reads, search, logs, lineage walks, rollups read right after a write,
//! incidents, erasure, tenants kept apart, retried writes counted once.
//!
//! Each test runs against every backend `backends()` opens: the embedded SQLite store
//! and ClickHouse — a fresh database on the server `THREADLINE_TEST_CLICKHOUSE` names,
//! and on the two test clusters (two shards; two replicas of one shard), all of which
//! `scripts/test` starts. A new backend joins by adding itself there; nothing
//! below names one.

use std::sync::Arc;

use threadline_analysis::{observe, Dimension, Incident, IncidentId, Level, Metric};
use threadline_model::{
    AttrValue, Attribute, Direction, EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate, LineageEventKey,
    LlmView, LogDetail, LogRecord, NodeId, NodeKind, NodeUpsert, SpanDetail, SpanEvent, SpanId,
    SpanKind, SpanOrigin, SpanRecord, SpanStatus, StatusCode, TenantId, TraceId,
};
use threadline_store::{
    ClickHouseConfig, ClickHouseOptions, ClickHouseStore, EmbeddedConfig, ErasureSubject,
    ErrorKind, ExemplarQuery, LogQuery, Store, TraceQuery, WalkLimits,
};

/// A store under test and what keeps it alive.
struct Backend {
    name: &'static str,
    store: Store,
    _dir: tempfile::TempDir,
}

/// Every backend, each fresh and empty.
fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_embedded(dir.path(), EmbeddedConfig::default()).unwrap();
    vec![
        Backend {
            name: "sqlite",
            store,
            _dir: dir,
        },
        clickhouse("clickhouse", ClickHouseConfig::for_tests("tl_contract")),
        clickhouse(
            "clickhouse two shards",
            ClickHouseConfig::for_tests_on_cluster("tl_contract", false),
        ),
        clickhouse(
            "clickhouse two replicas",
            ClickHouseConfig::for_tests_on_cluster("tl_contract", true),
        ),
    ]
}

/// A ClickHouse store in a database of its own on the test server or cluster.
fn clickhouse(name: &'static str, config: ClickHouseConfig) -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let store = ClickHouseStore::open(&config, ClickHouseOptions::default(), dir.path()).unwrap();
    Backend {
        name,
        store: Store::new(store),
        _dir: dir,
    }
}

/// Runs `check` against each backend, naming the backend when it fails.
fn each_backend(check: impl Fn(&Store)) {
    each_of(backends(), |backend| check(&backend.store));
}

/// Runs `check` against each of `backends`, naming the backend when it fails.
fn each_of(backends: Vec<Backend>, check: impl Fn(&Backend)) {
    for backend in backends {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&backend)));
        if let Err(panic) = outcome {
            eprintln!("store contract broken by the {} backend", backend.name);
            std::panic::resume_unwind(panic);
        }
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

/// A minute of span time, well inside the range every backend stores.
const MINUTE: u64 = 29_000_000;
const T0: u64 = MINUTE * 60_000_000_000;

fn origin(service: &str) -> Arc<SpanOrigin> {
    Arc::new(SpanOrigin {
        resource_attributes: vec![Attribute::new(
            "service.name",
            AttrValue::String(service.into()),
        )],
        ..Default::default()
    })
}

/// What one request of a chat route looks like: a gateway span carrying the route,
/// session and user, and a model call below it on an inference instance.
struct Request<'a> {
    trace: u8,
    start_ns: u64,
    duration_ms: u64,
    user: &'a str,
    session: &'a str,
    prompt: &'a str,
    failed: bool,
}

impl Request<'_> {
    fn spans(&self) -> Vec<SpanRecord> {
        let trace_id = TraceId([self.trace; 16]);
        let view = |model: Option<&str>| LlmView {
            request_model: model.map(str::to_owned),
            input_tokens: model.map(|_| 12),
            output_tokens: model.map(|_| 30),
            route: Some("/chat".into()),
            session_id: Some(self.session.into()),
            user_id: Some(self.user.into()),
            instance_id: model.map(|_| "vllm-0".into()),
            image: model.map(|_| "registry/vllm:0.6".into()),
            adapter_id: model.map(|_| "support-lora".into()),
            ..Default::default()
        };
        let span = |id: u8,
                    parent: Option<u8>,
                    service: &str,
                    kind: SpanKind,
                    start: u64,
                    dur_ms: u64,
                    model: Option<&str>| SpanRecord {
            trace_id,
            span_id: SpanId([self.trace, id, 0, 0, 0, 0, 0, 1]),
            parent_span_id: parent.map(|p| SpanId([self.trace, p, 0, 0, 0, 0, 0, 1])),
            name: if model.is_some() {
                "chat llama-3-8b".into()
            } else {
                "POST /chat".into()
            },
            service: service.into(),
            kind,
            start_time_unix_nano: start,
            end_time_unix_nano: start + dur_ms * 1_000_000,
            detail: SpanDetail {
                flags: 1,
                attributes: vec![
                    Attribute::new("http.route", AttrValue::String("/chat".into())),
                    Attribute::new("session.id", AttrValue::String(self.session.into())),
                    Attribute::new("user.id", AttrValue::String(self.user.into())),
                    Attribute::new("gen_ai.prompt", AttrValue::String(self.prompt.into())),
                ],
                status: SpanStatus {
                    code: if self.failed && model.is_some() {
                        StatusCode::Error
                    } else {
                        StatusCode::Unset
                    },
                    message: String::new(),
                },
                ..Default::default()
            },
            origin: origin(service),
            llm: Some(view(model)),
        };
        vec![
            span(
                1,
                None,
                "gateway",
                SpanKind::Server,
                self.start_ns,
                self.duration_ms,
                None,
            ),
            span(
                2,
                Some(1),
                "vllm",
                SpanKind::Client,
                self.start_ns + 2_000_000,
                self.duration_ms - 4,
                Some("llama-3-8b"),
            ),
        ]
    }
}

fn request(trace: u8, user: &str) -> Request<'_> {
    Request {
        trace,
        start_ns: T0 + trace as u64 * 1_000_000_000,
        duration_ms: 100 + trace as u64,
        user,
        session: "s-1",
        prompt: "how do I reset my password",
        failed: false,
    }
}

fn write(store: &Store, tenant: &TenantId, spans: &[SpanRecord]) {
    store.write_blocking(tenant, spans).unwrap();
}

fn trace_ids(store: &Store, tenant: &TenantId, query: &TraceQuery) -> Vec<TraceId> {
    let mut traces: Vec<_> = store
        .search(tenant, query)
        .unwrap()
        .traces
        .into_iter()
        .map(|t| t.trace_id)
        .collect();
    traces.sort();
    traces
}

/// The traces with a span whose attribute `key` is `value`, by id.
fn with_attribute(store: &Store, tenant: &TenantId, key: &str, value: &str) -> Vec<TraceId> {
    trace_ids(
        store,
        tenant,
        &TraceQuery {
            attributes: vec![(key.into(), value.into())],
            ..all_traces()
        },
    )
}

fn all_traces() -> TraceQuery {
    TraceQuery {
        limit: 100,
        ..Default::default()
    }
}

#[test]
fn a_written_trace_reads_back_whole() {
    each_backend(|store| {
        let acme = tenant("acme");
        let spans = request(1, "u-1").spans();
        write(store, &acme, &spans);

        assert_eq!(store.get_trace(&acme, TraceId([1; 16])).unwrap(), spans);
        let skeleton = store.trace_skeleton(&acme, TraceId([1; 16])).unwrap();
        assert_eq!(skeleton.len(), 2);
        let (opened, mut reader) = store.open_trace(&acme, TraceId([1; 16])).unwrap().unwrap();
        let whole: Vec<_> = opened.iter().map(|s| reader.span(s).unwrap()).collect();
        assert_eq!(whole, spans);
        assert_eq!(
            store
                .get_span(&acme, TraceId([1; 16]), spans[1].span_id)
                .unwrap(),
            Some(spans[1].clone())
        );

        // Absent things are empty, not errors.
        assert!(store.get_trace(&acme, TraceId([9; 16])).unwrap().is_empty());
        assert!(store.open_trace(&acme, TraceId([9; 16])).unwrap().is_none());
        assert_eq!(
            store
                .get_span(&acme, TraceId([1; 16]), SpanId([7; 8]))
                .unwrap(),
            None
        );
    });
}

#[test]
fn search_finds_traces_from_seconds_ago_to_days_ago_and_ahead_of_the_clock() {
    each_backend(|store| {
        let acme = tenant("acme");
        let now = now_ns();
        let s = 1_000_000_000;
        // A clock an hour ahead, a second ago, a quarter of an hour ago, two days ago.
        let starts = [
            now + 3_600 * s,
            now - s,
            now - 900 * s,
            now - 2 * 86_400 * s,
        ];
        for (i, start_ns) in starts.iter().enumerate() {
            let req = Request {
                start_ns: *start_ns,
                ..request(i as u8 + 1, "u-1")
            };
            write(store, &acme, &req.spans());
        }
        let newest_first = |q: &TraceQuery| -> Vec<u8> {
            let page = store.search(&acme, q).unwrap();
            page.traces.iter().map(|t| t.trace_id.0[0]).collect()
        };
        assert_eq!(newest_first(&all_traces()), vec![1, 2, 3, 4]);
        let service = TraceQuery {
            service: Some("vllm".into()),
            ..all_traces()
        };
        assert_eq!(newest_first(&service), vec![1, 2, 3, 4]);
        // Page by page, one trace a page.
        let mut q = TraceQuery {
            limit: 1,
            ..service
        };
        let mut seen = Vec::new();
        loop {
            let page = store.search(&acme, &q).unwrap();
            seen.extend(page.traces.iter().map(|t| t.trace_id.0[0]));
            match page.next_cursor {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, vec![1, 2, 3, 4]);
        // A range ending in the past, and one ending ahead of now.
        let past = TraceQuery {
            start_to_unix_nano: Some(now - 600 * s),
            ..all_traces()
        };
        assert_eq!(newest_first(&past), vec![3, 4]);
        let recent = TraceQuery {
            start_from_unix_nano: Some(now - 60 * s),
            start_to_unix_nano: Some(now + 7_200 * s),
            ..all_traces()
        };
        assert_eq!(newest_first(&recent), vec![1, 2]);
        let text = TraceQuery {
            text: Some("password".into()),
            ..all_traces()
        };
        assert_eq!(newest_first(&text), vec![1, 2, 3, 4]);
    });
}

#[test]
fn search_filters_and_pages_newest_first() {
    each_backend(|store| {
        let acme = tenant("acme");
        for trace in 1..=5 {
            let mut req = request(trace, "u-1");
            req.failed = trace == 3;
            if trace == 4 {
                req.prompt = "summarise the quarterly invoice";
            }
            write(store, &acme, &req.spans());
        }
        let page = store.search(&acme, &all_traces()).unwrap();
        let starts: Vec<_> = page.traces.iter().map(|t| t.start_time_unix_nano).collect();
        assert_eq!(page.traces.len(), 5);
        assert!(starts.windows(2).all(|w| w[0] >= w[1]), "{starts:?}");
        let newest = &page.traces[0];
        assert_eq!(newest.trace_id, TraceId([5; 16]));
        assert_eq!(newest.root_service, "gateway");
        assert_eq!(newest.span_count, 2);
        assert_eq!(newest.session_id.as_deref(), Some("s-1"));

        let errors = TraceQuery {
            errors_only: true,
            ..all_traces()
        };
        assert_eq!(trace_ids(store, &acme, &errors), vec![TraceId([3; 16])]);
        let text = TraceQuery {
            text: Some("invoice".into()),
            ..all_traces()
        };
        assert_eq!(trace_ids(store, &acme, &text), vec![TraceId([4; 16])]);
        let model = TraceQuery {
            model: Some("llama".into()),
            ..all_traces()
        };
        assert_eq!(trace_ids(store, &acme, &model).len(), 5);
        let attr = TraceQuery {
            attributes: vec![("user.id".into(), "u-1".into())],
            service: Some("vllm".into()),
            ..all_traces()
        };
        assert_eq!(trace_ids(store, &acme, &attr).len(), 5);
        let nobody = TraceQuery {
            attributes: vec![("user.id".into(), "u-404".into())],
            ..all_traces()
        };
        assert!(trace_ids(store, &acme, &nobody).is_empty());

        // Pages of two cover every trace once.
        let mut seen = Vec::new();
        let mut query = TraceQuery {
            limit: 2,
            ..Default::default()
        };
        loop {
            let page = store.search(&acme, &query).unwrap();
            seen.extend(page.traces.iter().map(|t| t.trace_id));
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => break,
            }
        }
        assert_eq!(
            seen,
            (1..=5).rev().map(|t| TraceId([t; 16])).collect::<Vec<_>>()
        );

        let services: Vec<_> = store
            .services(&acme)
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(services, ["gateway", "vllm"]);
        let ops = store.operations(&acme, Some("vllm")).unwrap();
        assert_eq!(
            ops,
            [(
                "vllm".to_owned(),
                "chat llama-3-8b".to_owned(),
                SpanKind::Client
            )]
        );
        assert_eq!(
            store
                .recent_sessions(&acme, (None, None), Some("u-1"), 10)
                .unwrap(),
            ["s-1"]
        );
    });
}

/// A first page that runs out of the store's time budget (ClickHouse's
/// `first_page_budget`; the embedded store is never out of time) holds every matching
/// trace that started since the point it reached and says so; the pages after it go on
/// from there, and all pages together are the exhaustive answer, in order, each trace
/// once — a trace whose model call came long after its root among them.
#[test]
fn a_first_page_out_of_time_says_how_far_it_searched_and_the_next_pages_go_on() {
    let mut config = ClickHouseConfig::for_tests("tl_contract_budget");
    config.first_page_budget = Some(std::time::Duration::ZERO);
    let mut all = backends();
    all.push(clickhouse(
        "clickhouse without time for a first page",
        config,
    ));
    each_of(all, |backend| {
        first_pages_out_of_time(&backend.store, backend.name.contains("without time"))
    });
}

fn first_pages_out_of_time(store: &Store, out_of_time: bool) {
    let acme = tenant("acme");
    let now = now_ns();
    let s = 1_000_000_000;
    let starts = [
        now + 600 * s,
        now - 2 * s,
        now - 90 * s,
        now - 7_200 * s,
        now - 3 * 86_400 * s,
    ];
    for (i, start_ns) in starts.iter().enumerate() {
        let mut spans = Request {
            start_ns: *start_ns,
            ..request(i as u8 + 1, "u-1")
        }
        .spans();
        if i == 3 {
            // Its model call two hours after its root, on a clock ahead: found in the
            // first, newest window, long after the trace's start.
            spans[1].start_time_unix_nano = now + 300 * s;
            spans[1].end_time_unix_nano = now + 301 * s;
        }
        write(store, &acme, &spans);
    }
    let exhaustive = TraceQuery {
        service: Some("vllm".into()),
        limit: 100,
        exhaustive: true,
        ..Default::default()
    };
    let expected: Vec<TraceId> = store
        .search(&acme, &exhaustive)
        .unwrap()
        .traces
        .iter()
        .map(|t| t.trace_id)
        .collect();
    assert_eq!(
        expected,
        (1..=5).map(|t| TraceId([t; 16])).collect::<Vec<_>>()
    );
    for (query, wanted) in [
        (
            TraceQuery {
                limit: 2,
                exhaustive: false,
                ..exhaustive.clone()
            },
            expected.clone(),
        ),
        (
            TraceQuery {
                limit: 2,
                exhaustive: false,
                attributes: vec![("user.id".into(), "u-404".into())],
                ..exhaustive.clone()
            },
            Vec::new(),
        ),
    ] {
        let mut q = query;
        let mut seen = Vec::new();
        let mut first = true;
        loop {
            let page = store.search(&acme, &q).unwrap();
            assert!(page.traces.len() <= q.limit);
            if let Some(from) = page.searched_from_unix_nano {
                assert!(first, "only a first page is cut short");
                assert!(page.next_cursor.is_some(), "a cut page goes on");
                assert!(
                    page.traces.iter().all(|t| t.start_time_unix_nano >= from),
                    "a cut page holds traces since the point it reached"
                );
            } else if first {
                assert!(
                    !out_of_time,
                    "a store out of time says so on its first page"
                );
            }
            seen.extend(page.traces.iter().map(|t| t.trace_id));
            first = false;
            match page.next_cursor {
                Some(c) => q.cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, wanted);
    }
}

/// A trace starts at its earliest span, wherever the search's range and the store's own
/// read windows cut it: a long agent trace whose last span is hours after its root is
/// found at its root's time, and not at all by a range that starts after its root.
#[test]
fn a_trace_starts_at_its_earliest_span_whatever_the_range() {
    const HOUR: u64 = 3_600_000_000_000;
    each_backend(|store| {
        let acme = tenant("acme");
        let mut long = request(1, "u-1").spans();
        long[1].start_time_unix_nano = T0 + 2 * HOUR;
        long[1].end_time_unix_nano = T0 + 2 * HOUR + 1_000_000;
        write(store, &acme, &long);
        let later = Request {
            start_ns: T0 + HOUR,
            ..request(2, "u-1")
        };
        write(store, &acme, &later.spans());
        let expect = vec![TraceId([2; 16]), TraceId([1; 16])];
        for to in [
            None,
            Some(T0 + 2 * HOUR + 1_000_000_000),
            Some(T0 + 3 * HOUR),
        ] {
            let query = TraceQuery {
                start_to_unix_nano: to,
                ..all_traces()
            };
            let page = store.search(&acme, &query).unwrap();
            let found: Vec<_> = page.traces.iter().map(|t| t.trace_id).collect();
            assert_eq!(found, expect, "to {to:?}");
            assert_eq!(
                page.traces[1].start_time_unix_nano,
                long[0].start_time_unix_nano
            );
            assert_eq!(
                page.traces[1].duration_nanos,
                2 * HOUR + 1_000_000 - (long[0].start_time_unix_nano - T0)
            );
        }
        let from_after_its_root = TraceQuery {
            start_from_unix_nano: Some(T0 + HOUR / 2),
            ..all_traces()
        };
        assert_eq!(
            trace_ids(store, &acme, &from_after_its_root),
            vec![TraceId([2; 16])]
        );
        let by_the_late_span = TraceQuery {
            start_from_unix_nano: Some(T0 + HOUR / 2),
            span_name: Some("chat llama-3-8b".into()),
            ..all_traces()
        };
        assert_eq!(
            trace_ids(store, &acme, &by_the_late_span),
            vec![TraceId([2; 16])]
        );
    });
}

#[test]
fn tenants_never_see_each_other() {
    each_backend(|store| {
        let (acme, globex) = (tenant("acme"), tenant("globex"));
        write(store, &acme, &request(1, "u-1").spans());
        write(store, &globex, &request(2, "u-2").spans());
        let lineage = |seen_ns| GraphUpdate {
            nodes: vec![NodeUpsert {
                id: "dataset:wh:orders".parse().unwrap(),
                seen_ns,
                props: serde_json::json!({}),
            }],
            ..Default::default()
        };
        store
            .write_graph(&acme, lineage(1), 1)
            .unwrap()
            .wait_blocking()
            .unwrap();

        assert!(store
            .get_trace(&globex, TraceId([1; 16]))
            .unwrap()
            .is_empty());
        assert!(store.get_trace(&acme, TraceId([2; 16])).unwrap().is_empty());
        assert_eq!(
            trace_ids(store, &globex, &all_traces()),
            vec![TraceId([2; 16])]
        );
        assert!(store
            .get_node(&globex, &"dataset:wh:orders".parse().unwrap())
            .unwrap()
            .is_none());
        assert!(store.resolve_node(&globex, "orders").unwrap().is_empty());
        let minutes = (MINUTE as i64, MINUTE as i64 + 5);
        let requests = |t: &TenantId| -> u64 {
            store
                .rollup_cells(t, minutes.0, minutes.1)
                .unwrap()
                .iter()
                .filter(|(_, key, _)| key.level() == Level::Request)
                .map(|(_, _, cell)| cell.requests)
                .sum()
        };
        assert_eq!((requests(&acme), requests(&globex)), (1, 1));
        let unknown = tenant("initech");
        assert!(store
            .search(&unknown, &all_traces())
            .unwrap()
            .traces
            .is_empty());
        assert!(store.services(&unknown).unwrap().is_empty());
        let mut tenants = store.tenants().unwrap();
        tenants.sort();
        assert_eq!(tenants, [acme, globex]);
    });
}

#[test]
fn rollups_and_hops_read_right_after_the_write() {
    each_backend(|store| {
        let acme = tenant("acme");
        for trace in 1..=3 {
            let mut req = request(trace, "u-1");
            req.failed = trace == 2;
            write(store, &acme, &req.spans());
        }
        // No flush: the write's ack is the only wait.
        let cells = store
            .rollup_cells(&acme, MINUTE as i64, MINUTE as i64)
            .unwrap();
        let at = |level: Level| {
            cells
                .iter()
                .filter(|(_, key, _)| key.level() == level)
                .fold((0, 0, 0), |(r, e, t), (minute, key, cell)| {
                    assert_eq!(*minute, MINUTE as i64);
                    assert_eq!(key.get(Dimension::Route), "/chat");
                    (r + cell.requests, e + cell.errors, t + cell.output_tokens)
                })
        };
        assert_eq!(at(Level::Request), (3, 1, 90));
        assert_eq!(at(Level::Call), (3, 1, 90));
        assert_eq!(
            store.rollup_minute_range(&acme).unwrap(),
            Some((MINUTE as i64, MINUTE as i64))
        );
        let hops = store
            .service_hops(&acme, MINUTE as i64, MINUTE as i64)
            .unwrap();
        assert!(
            hops.iter().any(|(hop, cell)| hop.caller == "gateway"
                && hop.callee == "vllm"
                && cell.calls == 3),
            "{:?}",
            hops.iter()
                .map(|(hop, cell)| (hop, cell.calls))
                .collect::<Vec<_>>()
        );
        assert!(store
            .rollup_cells(&acme, MINUTE as i64 + 1, MINUTE as i64 + 9)
            .unwrap()
            .is_empty());
    });
}

#[test]
fn a_retried_export_is_stored_and_counted_once() {
    each_backend(|store| {
        let acme = tenant("acme");
        let spans = request(1, "u-1").spans();
        let mut first = observe(&spans);
        let counted = first.len();
        store
            .write_spans(&acme, &spans, &mut first, GraphUpdate::default())
            .unwrap()
            .wait_blocking()
            .unwrap();
        assert_eq!(first.len(), counted);
        let mut again = observe(&spans);
        store
            .write_spans(&acme, &spans, &mut again, GraphUpdate::default())
            .unwrap()
            .wait_blocking()
            .unwrap();
        assert!(again.is_empty(), "a retry's requests are not counted again");

        assert_eq!(store.get_trace(&acme, TraceId([1; 16])).unwrap(), spans);
        let page = store.search(&acme, &all_traces()).unwrap();
        assert_eq!(page.traces.len(), 1);
        assert_eq!(page.traces[0].span_count, 2);
        let requests: u64 = store
            .rollup_cells(&acme, MINUTE as i64, MINUTE as i64)
            .unwrap()
            .iter()
            .filter(|(_, key, _)| key.level() == Level::Request)
            .map(|(_, _, cell)| cell.requests)
            .sum();
        assert_eq!(requests, 1);
    });
}

#[test]
fn exemplars_filter_on_typed_dimensions() {
    each_backend(|store| {
        let acme = tenant("acme");
        for trace in 1..=4 {
            let mut req = request(trace, "u-1");
            req.failed = trace == 1;
            write(store, &acme, &req.spans());
        }
        let window = |filters: Vec<(Dimension, String)>, errors_only| ExemplarQuery {
            filters,
            from_ns: T0 as i64,
            to_ns: T0 as i64 + 60_000_000_000,
            errors_only,
            limit: 10,
            ..Default::default()
        };
        let slowest = store
            .exemplars(
                &acme,
                &window(vec![(Dimension::Route, "/chat".into())], false),
            )
            .unwrap();
        assert!(!slowest.is_empty());
        assert!(slowest.windows(2).all(|w| w[0].1 >= w[1].1), "{slowest:?}");
        assert_eq!(slowest[0].0, TraceId([4; 16]));
        let failed = store
            .exemplars(
                &acme,
                &window(vec![(Dimension::Instance, "vllm-0".into())], true),
            )
            .unwrap();
        assert_eq!(
            failed.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            [TraceId([1; 16])]
        );
        let none = store
            .exemplars(
                &acme,
                &window(vec![(Dimension::Model, "gpt-4o".into())], false),
            )
            .unwrap();
        assert!(none.is_empty());

        let bound = store.bound_instances(&acme).unwrap();
        let image = NodeId::new(NodeKind::Image, "registry/vllm:0.6");
        assert!(
            bound.iter().any(|b| b.node == image && b.instances == 1),
            "{bound:?}"
        );
        let served = store
            .requests_served(&acme, &["support-lora".into()], &[], T0 as i64)
            .unwrap();
        assert_eq!(served.traces, 4);
    });
}

fn log(trace: u8, second: u64, body: &str, severity: i32) -> LogRecord {
    LogRecord {
        time_unix_nano: T0 + second * 1_000_000_000,
        trace_id: Some(TraceId([trace; 16])),
        span_id: Some(SpanId([trace, 1, 0, 0, 0, 0, 0, 1])),
        service: "gateway".into(),
        detail: LogDetail {
            severity_number: severity,
            severity_text: String::new(),
            body: AttrValue::String(body.into()),
            attributes: vec![Attribute::new("user.id", AttrValue::String("u-1".into()))],
            ..Default::default()
        },
        origin: origin("gateway"),
    }
}

#[test]
fn free_text_is_found_wherever_a_span_or_its_logs_say_it_and_only_there() {
    each_backend(|store| {
        let acme = tenant("acme");
        let mut spans = Vec::new();
        for trace in 1..=7 {
            spans.extend(request(trace, "u-1").spans());
        }
        let model_call = |spans: &[SpanRecord], trace: u8| -> usize {
            spans
                .iter()
                .position(|s| {
                    s.trace_id == TraceId([trace; 16])
                        && s.llm.as_ref().is_some_and(|l| l.request_model.is_some())
                })
                .unwrap()
        };
        // Trace 1: in the status message; 2: in an exception event; 3: in a GenAI
        // message event (every string of it); 4: in a log record of the trace, stamped
        // a little before the trace began (a sender's clock behind); 5: the words on
        // two different spans; 6: a word only in an attribute's key and a
        // non-text attribute's value; 7: in a prompt attribute repeated (its second).
        let i = model_call(&spans, 1);
        spans[i].detail.status.message = "quota exhausted for tenant".into();
        let event = |name: &str, key: &str, value: AttrValue| SpanEvent {
            time_unix_nano: T0,
            name: name.into(),
            attributes: vec![Attribute::new(key, value)],
            dropped_attributes_count: 0,
        };
        let i = model_call(&spans, 2);
        spans[i].detail.events.push(event(
            "exception",
            "exception.message",
            AttrValue::String("Gateway Quota exhausted upstream".into()),
        ));
        let i = model_call(&spans, 3);
        spans[i].detail.events.push(event(
            "gen_ai.choice",
            "message",
            AttrValue::Array(vec![AttrValue::String("your quota is exhausted".into())]),
        ));
        let i = model_call(&spans, 5);
        spans[i].detail.status.message = "quota".into();
        let root5 = spans
            .iter()
            .position(|s| s.trace_id == TraceId([5; 16]) && s.parent_span_id.is_none())
            .unwrap();
        spans[root5].detail.status.message = "exhausted".into();
        let i = model_call(&spans, 6);
        spans[i].detail.attributes.extend([
            Attribute::new("quota.exhausted", AttrValue::Bool(true)),
            Attribute::new("limit.kind", AttrValue::String("quota exhausted".into())),
        ]);
        let i = model_call(&spans, 7);
        spans[i].detail.attributes.push(Attribute::new(
            "gen_ai.prompt",
            AttrValue::String("quota exhausted".into()),
        ));
        write(store, &acme, &spans);
        let mut early = log(4, 4, "request rejected: Quota Exhausted", 17);
        early.time_unix_nano -= 2_000_000_000;
        store
            .write_logs(&acme, &[early])
            .unwrap()
            .wait_blocking()
            .unwrap();
        let found = |text: &str| {
            trace_ids(
                store,
                &acme,
                &TraceQuery {
                    text: Some(text.into()),
                    ..all_traces()
                },
            )
        };
        let ids = |t: &[u8]| t.iter().map(|&t| TraceId([t; 16])).collect::<Vec<_>>();
        assert_eq!(found("quota exhausted"), ids(&[1, 2, 3, 4, 7]));
        assert_eq!(
            found("exhaus"),
            ids(&[1, 2, 3, 4, 5, 7]),
            "the last word a prefix"
        );
        assert_eq!(found("QUOTA"), ids(&[1, 2, 3, 4, 5, 7]), "any case");
        assert_eq!(found("upstream gateway"), ids(&[2]));
        // Every word on one span or one log record: the log of trace 4 has no prompt.
        assert_eq!(found("quota password exhausted"), ids(&[1, 2, 3, 7]));
        // Attribute filters on text keys and others; a repeated key is its first.
        let attr = |key: &str, value: &str| with_attribute(store, &acme, key, value);
        assert_eq!(
            attr("gen_ai.prompt", "how do I reset my password"),
            ids(&[1, 2, 3, 4, 5, 6, 7])
        );
        assert!(attr("gen_ai.prompt", "quota exhausted").is_empty());
        assert_eq!(attr("limit.kind", "quota exhausted"), ids(&[6]));
        assert_eq!(attr("quota.exhausted", "true"), ids(&[6]));
        assert!(found("exhausted unheard").is_empty());
    });
}

/// The ClickHouse backend leaves out of its search rows the pairs a column holds the
/// same value of (`FOLDS`): a filter on such a key still matches what was sent, and
/// only that, also when the column holds another key's value (conventions' precedence).
#[test]
fn attribute_filters_match_as_sent_where_a_column_repeats_the_value() {
    each_backend(|store| {
        let acme = tenant("acme");
        let span = |trace: u8, attributes: &[(&str, &str)]| {
            let mut span = request(trace, "u-1").spans().remove(0);
            span.detail.attributes = attributes
                .iter()
                .map(|(k, v)| Attribute::new(*k, AttrValue::String((*v).into())))
                .collect();
            // As every span that comes in over OTLP: the view its attributes give.
            span.llm = threadline_model::llm_view(&span.name, &span.detail, &span.origin);
            span
        };
        let spans = vec![
            span(
                1,
                &[
                    ("session.id", "s-1"),
                    ("user.id", "u-1"),
                    ("http.route", "/chat"),
                    ("gen_ai.request.model", "m-1"),
                    ("gen_ai.response.model", "m-1"),
                    ("ab.group", "B"),
                ],
            ),
            // The session column holds the conversation id, the route column the
            // platform's route.
            span(
                2,
                &[
                    ("gen_ai.conversation.id", "conv-2"),
                    ("session.id", "s-2"),
                    ("http.route", "/a"),
                    ("api.route", "/b"),
                ],
            ),
            // A repeated key is its first.
            span(3, &[("session.id", "s-1"), ("session.id", "s-9")]),
        ];
        write(store, &acme, &spans);
        for s in &spans {
            assert_eq!(
                store.get_trace(&acme, s.trace_id).unwrap(),
                vec![s.clone()],
                "a span with the view its attributes give reads back as written"
            );
        }
        let attr = |key: &str, value: &str| with_attribute(store, &acme, key, value);
        let ids = |t: &[u8]| t.iter().map(|&t| TraceId([t; 16])).collect::<Vec<_>>();
        assert_eq!(attr("session.id", "s-1"), ids(&[1, 3]));
        assert_eq!(attr("session.id", "s-2"), ids(&[2]));
        assert_eq!(attr("session.id", "conv-2"), ids(&[]));
        assert_eq!(attr("gen_ai.conversation.id", "conv-2"), ids(&[2]));
        assert_eq!(attr("session.id", "s-9"), ids(&[]));
        assert_eq!(attr("user.id", "u-1"), ids(&[1]));
        assert_eq!(attr("http.route", "/chat"), ids(&[1]));
        assert_eq!(attr("http.route", "/a"), ids(&[2]));
        assert_eq!(attr("api.route", "/b"), ids(&[2]));
        assert_eq!(attr("api.route", "/a"), ids(&[]));
        assert_eq!(attr("http.route", "/b"), ids(&[]));
        assert_eq!(attr("gen_ai.request.model", "m-1"), ids(&[1]));
        assert_eq!(attr("gen_ai.response.model", "m-1"), ids(&[1]));
        assert_eq!(attr("ab.group", "B"), ids(&[1]));
        assert_eq!(attr("ab.group", "A"), ids(&[]));
        assert_eq!(
            attr("service.name", "gateway"),
            ids(&[1, 2, 3]),
            "a resource's"
        );
        assert_eq!(attr("service.name", "inference"), ids(&[]));
    });
}

#[test]
fn logs_read_by_trace_and_by_search() {
    each_backend(|store| {
        let acme = tenant("acme");
        let records = vec![
            log(1, 1, "retrieved 4 passages", 9),
            log(1, 2, "upstream timeout talking to vllm", 17),
            log(2, 3, "retrieved 2 passages", 9),
        ];
        store
            .write_logs(&acme, &records)
            .unwrap()
            .wait_blocking()
            .unwrap();
        assert_eq!(
            store.logs_of(&acme, TraceId([1; 16]), None).unwrap(),
            records[..2]
        );
        let all = LogQuery {
            limit: 10,
            ..Default::default()
        };
        let page = store.search_logs(&acme, &all).unwrap();
        let times: Vec<_> = page.logs.iter().map(|r| r.record.time_unix_nano).collect();
        assert_eq!(times.len(), 3);
        assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first");
        let timeout = LogQuery {
            text: Some("timeout".into()),
            ..all.clone()
        };
        let found = store.search_logs(&acme, &timeout).unwrap();
        assert_eq!(found.logs.len(), 1);
        let severe = LogQuery {
            min_severity: Some(13),
            ..all.clone()
        };
        assert_eq!(store.search_logs(&acme, &severe).unwrap().logs.len(), 1);
        assert!(store
            .search_logs(&tenant("globex"), &all)
            .unwrap()
            .logs
            .is_empty());
    });
}

fn id(text: &str) -> NodeId {
    text.parse().unwrap()
}

fn edge(src: &str, dst: &str, kind: EdgeKind, seen_ns: i64) -> EdgeUpsert {
    EdgeUpsert {
        src: EdgeEnd::Node(id(src)),
        dst: EdgeEnd::Node(id(dst)),
        kind,
        seen_ns,
        evidence: serde_json::Value::Null,
        declared: None,
    }
}

fn node(text: &str, seen_ns: i64) -> NodeUpsert {
    NodeUpsert {
        id: id(text),
        seen_ns,
        props: serde_json::json!({"name": text}),
    }
}

#[test]
fn lineage_walks_and_resent_events_change_nothing() {
    each_backend(|store| {
        let acme = tenant("acme");
        // dataset version -> training run -> adapter -> route
        let update = GraphUpdate {
            nodes: vec![
                node("dataset_version:wh:tickets@v1", 10),
                node("run:r1", 10),
                node("adapter:support-lora", 20),
            ],
            edges: vec![
                edge(
                    "dataset:wh:tickets",
                    "dataset_version:wh:tickets@v1",
                    EdgeKind::HasVersion,
                    10,
                ),
                edge(
                    "dataset_version:wh:tickets@v1",
                    "run:r1",
                    EdgeKind::InputTo,
                    10,
                ),
                edge("run:r1", "adapter:support-lora", EdgeKind::Produced, 20),
            ],
            event: Some(LineageEventKey {
                subject: "r1".into(),
                event_type: "COMPLETE".into(),
                event_time: "2025-03-01T00:00:00Z".into(),
            }),
            ..Default::default()
        };
        let applied = store
            .write_graph(&acme, update.clone(), 30)
            .unwrap()
            .wait_blocking()
            .unwrap();
        assert!(applied.changed);
        let again = store
            .write_graph(&acme, update, 40)
            .unwrap()
            .wait_blocking()
            .unwrap();
        assert!(!again.changed, "a re-sent event changes nothing");

        let run = store.get_node(&acme, &id("run:r1")).unwrap().unwrap();
        assert_eq!((run.first_seen_ns, run.last_seen_ns), (10, 10));
        assert_eq!(store.resolve_node(&acme, "r1").unwrap(), [id("run:r1")]);
        let adapters = store
            .find_nodes(&acme, Some(NodeKind::Adapter), Some("SUPPORT"), 10)
            .unwrap();
        assert_eq!(adapters.len(), 1);

        let downstream = store
            .walk(
                &acme,
                &id("dataset:wh:tickets"),
                &WalkLimits {
                    direction: Direction::Downstream,
                    depth: 5,
                    max_nodes: 100,
                    edge_kinds: vec![],
                },
            )
            .unwrap()
            .unwrap();
        let mut reached: Vec<_> = downstream.nodes.iter().map(|n| n.id.to_string()).collect();
        reached.sort();
        assert_eq!(
            reached,
            [
                "adapter:support-lora",
                "dataset:wh:tickets",
                "dataset_version:wh:tickets@v1",
                "run:r1"
            ]
        );
        let one_hop = store
            .walk(
                &acme,
                &id("adapter:support-lora"),
                &WalkLimits {
                    direction: Direction::Upstream,
                    depth: 1,
                    max_nodes: 100,
                    edge_kinds: vec![],
                },
            )
            .unwrap()
            .unwrap();
        assert_eq!(one_hop.nodes.len(), 2);
        assert!(store
            .walk(
                &acme,
                &id("run:nope"),
                &WalkLimits {
                    direction: Direction::Both,
                    depth: 1,
                    max_nodes: 10,
                    edge_kinds: vec![],
                }
            )
            .unwrap()
            .is_none());
        let counts = store.node_counts(&acme).unwrap();
        assert!(counts.contains(&(NodeKind::Run, 1)), "{counts:?}");
        let dump = store.graph_dump(&acme, 100).unwrap().unwrap();
        assert_eq!(dump.nodes.len(), 4);
        assert_eq!(dump.edges.len(), 3);
        assert!(store.graph_dump(&acme, 2).unwrap().is_none());
    });
}

fn incident(id: &str, onset: i64, end: Option<i64>) -> Incident {
    Incident {
        id: IncidentId::new(id),
        service: "gateway".into(),
        route: "/chat".into(),
        model: "llama-3-8b".into(),
        onset_minute: onset,
        detected_minute: onset + 2,
        end_minute: end,
        metric: Metric::P99Latency,
        anomalies: Vec::new(),
        score: 7.5,
        open: if end.is_none() {
            vec![Metric::P99Latency]
        } else {
            vec![]
        },
    }
}

#[test]
fn incidents_are_saved_updated_and_found() {
    each_backend(|store| {
        let acme = tenant("acme");
        assert_eq!(store.detector_mark(&acme).unwrap(), None);
        store
            .save_incidents(
                &acme,
                vec![incident("inc-a", 100, None), incident("inc-b", 200, None)],
                205,
            )
            .unwrap()
            .wait_blocking()
            .unwrap();
        store
            .save_incidents(&acme, vec![incident("inc-a", 100, Some(130))], 210)
            .unwrap()
            .wait_blocking()
            .unwrap();
        assert_eq!(store.detector_mark(&acme).unwrap(), Some(210));
        let found = store.incidents(&acme, 0, 1_000).unwrap();
        let ids: Vec<_> = found.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["inc-a", "inc-b"]);
        assert_eq!(
            store.incident(&acme, &IncidentId::new("inc-a")).unwrap(),
            Some(incident("inc-a", 100, Some(130)))
        );
        assert_eq!(store.incidents(&acme, 150, 1_000).unwrap().len(), 1);
        assert_eq!(
            store.incident(&acme, &IncidentId::new("inc-z")).unwrap(),
            None
        );
        assert_eq!(
            store
                .incident(&tenant("globex"), &IncidentId::new("inc-a"))
                .unwrap(),
            None
        );
    });
}

#[test]
fn erasing_a_user_removes_their_traces_logs_and_copies() {
    each_backend(|store| {
        let acme = tenant("acme");
        write(store, &acme, &request(1, "u-gone").spans());
        write(store, &acme, &request(2, "u-stays").spans());
        store
            .write_logs(&acme, &[log(1, 1, "hello from u-gone", 9)])
            .unwrap()
            .wait_blocking()
            .unwrap();
        let globex = tenant("globex");
        write(store, &globex, &request(1, "u-gone").spans());

        let applied = store
            .erase(
                &acme,
                ErasureSubject::UserId("u-gone".into()),
                "dpo@acme",
                T0 as i64,
            )
            .unwrap()
            .wait_blocking()
            .unwrap();
        let report = applied.erasure.expect("an erasure reports what it did");
        assert_eq!(report.traces_matched, 1);
        assert_eq!(report.spans_deleted, 2);
        assert!(report.logs_deleted >= 1);

        assert!(store.get_trace(&acme, TraceId([1; 16])).unwrap().is_empty());
        assert_eq!(
            trace_ids(store, &acme, &all_traces()),
            vec![TraceId([2; 16])]
        );
        let by_user = TraceQuery {
            user_id: Some("u-gone".into()),
            ..all_traces()
        };
        assert!(trace_ids(store, &acme, &by_user).is_empty());
        assert!(store
            .logs_of(&acme, TraceId([1; 16]), None)
            .unwrap()
            .is_empty());
        let text = LogQuery {
            text: Some("hello".into()),
            limit: 10,
            ..Default::default()
        };
        assert!(store.search_logs(&acme, &text).unwrap().logs.is_empty());
        // The other tenant's user of the same name is not theirs to erase.
        assert_eq!(store.get_trace(&globex, TraceId([1; 16])).unwrap().len(), 2);

        let audit = store.erasures(&acme).unwrap();
        assert_eq!(audit.len(), 1);
        assert!(store.erasures(&globex).unwrap().is_empty());
    });
}

/// A subject with more traces than one statement names (ClickHouse bounds a query's
/// size) is erased whole.
#[test]
fn erasing_a_user_with_thousands_of_traces_takes_them_all() {
    each_backend(|store| {
        let acme = tenant("acme");
        let mut spans = Vec::new();
        for n in 0..1_200u32 {
            let mut request = request(1, "u-busy").spans();
            for span in &mut request {
                span.trace_id.0[..4].copy_from_slice(&n.to_be_bytes());
                span.start_time_unix_nano += u64::from(n) * 1_000_000;
                span.end_time_unix_nano += u64::from(n) * 1_000_000;
            }
            spans.extend(request);
        }
        write(store, &acme, &spans);
        let report = store
            .erase(
                &acme,
                ErasureSubject::UserId("u-busy".into()),
                "dpo",
                T0 as i64,
            )
            .unwrap()
            .wait_blocking()
            .unwrap()
            .erasure
            .unwrap();
        assert_eq!(
            (report.traces_matched, report.spans_deleted),
            (1_200, 2_400)
        );
        for n in [0u32, 999, 1_000, 1_199] {
            assert!(store
                .get_trace(&acme, spans[n as usize * 2].trace_id)
                .unwrap()
                .is_empty());
        }
        assert!(trace_ids(store, &acme, &all_traces()).is_empty());
    });
}

#[test]
fn the_store_answers_and_reports_its_queue() {
    each_backend(|store| {
        store.ping().unwrap();
        write(store, &tenant("acme"), &request(1, "u-1").spans());
        let stats = store.writer_stats();
        assert!(stats.spans_committed >= 2, "{stats:?}");
        let too_many = TraceQuery {
            attributes: vec![("k".into(), "v".into()); TraceQuery::MAX_ATTRIBUTE_FILTERS + 1],
            ..all_traces()
        };
        let refused = store.search(&tenant("acme"), &too_many).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidQuery, "{refused}");
    });
}
