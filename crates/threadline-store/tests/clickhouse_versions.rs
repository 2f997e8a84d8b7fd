//! The ClickHouse backend on Debian's 18.16 and on a current release: a store on the
//! test server (18.16) runs a workload that touches every read; then the schema as
//! Threadline writes it for 26.9 (codecs, skip indexes) and every query the store sent
//! run in chdb (ClickHouse 26.9 in process, from PyPI) on the same rows, and the
//! answers must equal 18.16's (`chdb_check.py`).

use std::sync::Arc;

use threadline_analysis::{Dimension, Incident, IncidentId, Metric};
use threadline_model::{
    AttrValue, Attribute, EdgeEnd, EdgeKind, EdgeUpsert, GraphUpdate, LlmView, LogDetail,
    LogRecord, NodeId, NodeKind, SpanDetail, SpanId, SpanKind, SpanOrigin, SpanRecord, SpanStatus,
    StatusCode, TenantId, TraceId,
};
use threadline_store::{
    clickhouse_ddl, ClickHouseConfig, ClickHouseOptions, ClickHouseStore, ErasureSubject,
    ExemplarQuery, LogQuery, NameMatch, Store, TraceQuery, WalkLimits,
};

const T0: u64 = 29_000_000 * 60_000_000_000;

fn span(
    trace: u8,
    id: u8,
    parent: Option<u8>,
    user: &str,
    model: Option<&str>,
    ms: u64,
) -> SpanRecord {
    let start = T0 + u64::from(trace) * 1_000_000_000 + u64::from(id) * 1_000_000;
    SpanRecord {
        trace_id: TraceId([trace; 16]),
        span_id: SpanId([trace, id, 0, 0, 0, 0, 0, 1]),
        parent_span_id: parent.map(|p| SpanId([trace, p, 0, 0, 0, 0, 0, 1])),
        name: if model.is_some() {
            "chat llama".into()
        } else {
            "POST /chat".into()
        },
        service: if model.is_some() {
            "vllm".into()
        } else {
            "gateway".into()
        },
        kind: if parent.is_none() {
            SpanKind::Server
        } else {
            SpanKind::Client
        },
        start_time_unix_nano: start,
        end_time_unix_nano: start + ms * 1_000_000,
        detail: SpanDetail {
            attributes: vec![
                Attribute::new("user.id", AttrValue::String(user.into())),
                Attribute::new(
                    "gen_ai.prompt",
                    AttrValue::String(format!("refund order {trace} please")),
                ),
                Attribute::new("retries", AttrValue::Int(i64::from(trace % 3))),
            ],
            status: SpanStatus {
                code: if trace.is_multiple_of(4) && model.is_some() {
                    StatusCode::Error
                } else {
                    StatusCode::Unset
                },
                message: String::new(),
            },
            ..Default::default()
        },
        origin: Arc::new(SpanOrigin {
            resource_attributes: vec![Attribute::new(
                "service.name",
                AttrValue::String("x".into()),
            )],
            ..Default::default()
        }),
        llm: Some(LlmView {
            request_model: model.map(str::to_owned),
            input_tokens: model.map(|_| 10),
            output_tokens: model.map(|_| 20),
            route: Some("/chat".into()),
            session_id: Some(format!("s-{}", trace % 3)),
            user_id: Some(user.into()),
            instance_id: model.map(|_| format!("vllm-{}", trace % 2)),
            adapter_id: model.map(|_| "support-lora".into()),
            ab_group: Some(if trace.is_multiple_of(2) { "A" } else { "B" }.into()),
            ..Default::default()
        }),
    }
}

fn incident(id: &str, onset: i64) -> Incident {
    Incident {
        id: IncidentId::new(id),
        service: "gateway".into(),
        route: "/chat".into(),
        model: "llama".into(),
        onset_minute: onset,
        detected_minute: onset + 1,
        end_minute: None,
        metric: Metric::P99Latency,
        anomalies: Vec::new(),
        score: 9.0,
        open: vec![Metric::P99Latency],
    }
}

/// Every read the store answers, on data that gives each something to find.
fn workload(store: &Store) {
    let acme = TenantId::new("acme").unwrap();
    for trace in 1..=12u8 {
        let user = if trace.is_multiple_of(5) {
            "u-gone"
        } else {
            "u-1"
        };
        let spans = vec![
            span(trace, 1, None, user, None, 900 + u64::from(trace) * 10),
            span(trace, 2, Some(1), user, Some("llama-3-8b"), 700),
        ];
        store.write_blocking(&acme, &spans).unwrap();
    }
    let logs: Vec<LogRecord> = (1..=6u8)
        .map(|t| LogRecord {
            time_unix_nano: T0 + u64::from(t) * 1_000_000_000,
            trace_id: Some(TraceId([t; 16])),
            span_id: Some(SpanId([t, 2, 0, 0, 0, 0, 0, 1])),
            service: "vllm".into(),
            detail: LogDetail {
                severity_number: 9 + i32::from(t % 2) * 8,
                event_name: "gen_ai.user.message".into(),
                body: AttrValue::String(format!("refund request {t}")),
                ..Default::default()
            },
            origin: Arc::new(SpanOrigin::default()),
        })
        .collect();
    store
        .write_logs(&acme, &logs)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let update = GraphUpdate {
        edges: vec![EdgeUpsert {
            src: EdgeEnd::Node(NodeId::new(NodeKind::Model, "llama-3-8b")),
            dst: EdgeEnd::Node(NodeId::new(NodeKind::Adapter, "support-lora")),
            kind: EdgeKind::BaseOf,
            seen_ns: T0 as i64,
            evidence: serde_json::json!({}),
            declared: None,
        }],
        ..Default::default()
    };
    store
        .write_graph(&acme, update, T0 as i64)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let minute = (T0 / 60_000_000_000) as i64;
    store
        .save_incidents(
            &acme,
            vec![incident("inc-1", minute), incident("inc-2", minute + 1)],
            minute + 2,
        )
        .unwrap()
        .wait_blocking()
        .unwrap();

    let trace = TraceId([3; 16]);
    store.get_trace(&acme, trace).unwrap();
    store.trace_skeleton(&acme, trace).unwrap();
    let (skeleton, mut reader) = store.open_trace(&acme, trace).unwrap().unwrap();
    reader.span(&skeleton[1]).unwrap();
    store
        .get_span(&acme, trace, SpanId([3, 2, 0, 0, 0, 0, 0, 1]))
        .unwrap();
    let all = TraceQuery {
        limit: 5,
        ..Default::default()
    };
    let page = store.search(&acme, &all).unwrap();
    store
        .search(
            &acme,
            &TraceQuery {
                cursor: page.next_cursor,
                ..all.clone()
            },
        )
        .unwrap();
    for q in [
        TraceQuery {
            text: Some("refund order".into()),
            ..all.clone()
        },
        TraceQuery {
            attributes: vec![("retries".into(), "2".into())],
            ..all.clone()
        },
        TraceQuery {
            session_id: Some("s-1".into()),
            user_id: Some("u-1".into()),
            ..all.clone()
        },
        TraceQuery {
            adapter: Some("support-lora".into()),
            errors_only: true,
            ..all.clone()
        },
        TraceQuery {
            route: Some("/chat".into()),
            model: Some("LLAMA".into()),
            ..all.clone()
        },
        TraceQuery {
            span_name: Some("POST /chat".into()),
            service: Some("gate".into()),
            ..all.clone()
        },
        TraceQuery {
            service: Some("gateway".into()),
            names: NameMatch::Exact,
            ab_group: Some("A".into()),
            ..all.clone()
        },
        TraceQuery {
            min_duration_nanos: Some(950_000_000),
            start_from_unix_nano: Some(T0),
            start_to_unix_nano: Some(T0 + 10_000_000_000),
            ..all.clone()
        },
    ] {
        store.search(&acme, &q).unwrap();
    }
    store
        .recent_sessions(&acme, (Some(T0), None), Some("u-1"), 10)
        .unwrap();
    store.services(&acme).unwrap();
    store.operations(&acme, Some("vllm")).unwrap();
    store
        .exemplars(
            &acme,
            &ExemplarQuery {
                filters: vec![(Dimension::Instance, "vllm-1".into())],
                from_ns: T0 as i64,
                to_ns: (T0 + 60_000_000_000) as i64,
                min_duration_ns: Some(1),
                errors_only: false,
                limit: 3,
            },
        )
        .unwrap();
    store
        .requests_served(
            &acme,
            &["support-lora".into()],
            &["vllm-0".into()],
            T0 as i64,
        )
        .unwrap();
    store.logs_of(&acme, trace, None).unwrap();
    store
        .logs_of(&acme, trace, Some(SpanId([3, 2, 0, 0, 0, 0, 0, 1])))
        .unwrap();
    let logs = LogQuery {
        limit: 2,
        ..Default::default()
    };
    let first = store.search_logs(&acme, &logs).unwrap();
    store
        .search_logs(
            &acme,
            &LogQuery {
                cursor: first.next_cursor,
                ..logs.clone()
            },
        )
        .unwrap();
    store
        .search_logs(
            &acme,
            &LogQuery {
                text: Some("refund".into()),
                min_severity: Some(10),
                event_prefix: Some("gen_ai.".into()),
                service: Some("vllm".into()),
                from_unix_nano: Some(T0),
                to_unix_nano: Some(T0 + 60_000_000_000),
                ..logs
            },
        )
        .unwrap();
    store
        .walk(
            &acme,
            &NodeId::new(NodeKind::Adapter, "support-lora"),
            &WalkLimits {
                direction: threadline_model::Direction::Upstream,
                depth: 3,
                max_nodes: 100,
                edge_kinds: Vec::new(),
            },
        )
        .unwrap();
    store.rollup_cells(&acme, minute - 1, minute + 5).unwrap();
    store.rollup_minute_range(&acme).unwrap();
    store.service_hops(&acme, minute - 1, minute + 5).unwrap();
    store.incidents(&acme, minute - 1, minute + 5).unwrap();
    store.incident(&acme, &IncidentId::new("inc-2")).unwrap();
    store.detector_mark(&acme).unwrap();
    store.tenants().unwrap();
    store
        .hold_lease("check", "replica-a", 15_000_000_000)
        .unwrap();
    store
        .erase(
            &acme,
            ErasureSubject::UserId("u-gone".into()),
            "dpo",
            T0 as i64,
        )
        .unwrap()
        .wait_blocking()
        .unwrap();
    store.erasures(&acme).unwrap();
    store.search(&acme, &all).unwrap();
}

/// A request to the test server's HTTP interface; the body of its answer.
fn http(url: &str, sql: &str) -> Vec<u8> {
    let resp = reqwest::blocking::Client::new()
        .post(url)
        .body(sql.to_owned())
        .send()
        .unwrap();
    let status = resp.status();
    let body = resp.bytes().unwrap().to_vec();
    assert!(
        status.is_success(),
        "{sql}: {}",
        String::from_utf8_lossy(&body)
    );
    body
}

#[test]
fn the_current_schema_and_every_query_answer_in_chdb_as_on_18_16() {
    // As the `threadline` user of the test server (scripts/clickhouse makes it), the
    // only one whose queries are logged: what it sent is what the check replays.
    let mut config = ClickHouseConfig::for_tests("tl_versions");
    config.user = Some("threadline".into());
    config.password = Some(
        std::env::var("THREADLINE_TEST_CLICKHOUSE_PASSWORD")
            .unwrap_or_else(|_| "threadline-test".into()),
    );
    config.settings.push(("log_queries".into(), "1".into()));
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1;
    let local = tempfile::tempdir().unwrap();
    let store = Store::new(
        ClickHouseStore::open(&config, ClickHouseOptions::default(), local.path()).unwrap(),
    );
    workload(&store);
    drop(store);

    let url = format!("{}/?database={}", config.url, config.database);
    let db = &config.database;
    http(&url, "SYSTEM FLUSH LOGS");
    let logged = http(
        &url,
        &format!(
            "SELECT DISTINCT query FROM system.query_log WHERE type = 2 AND user = 'threadline' \
             AND event_time >= toDateTime({started}) AND query LIKE 'SELECT%' \
             AND query NOT LIKE '%system.%' AND query NOT LIKE '%version()%' FORMAT JSONEachRow"
        ),
    );
    let mut queries = Vec::new();
    for line in String::from_utf8(logged).unwrap().lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let sql = row["query"]
            .as_str()
            .unwrap()
            .trim_end()
            .trim_end_matches(';')
            .to_owned();
        // What the client appended for its own reading (RowBinary) goes: the check
        // reads TabSeparated.
        let sql = sql
            .trim_end_matches("FORMAT RowBinary")
            .trim_end()
            .to_owned();
        let answer = http(&url, &format!("{sql} FORMAT TabSeparated"));
        queries.push(serde_json::json!({
            "sql": sql,
            "answer": answer.iter().map(|&b| b as char).collect::<String>(),
        }));
    }
    assert!(
        queries.len() > 40,
        "only {} distinct queries were logged",
        queries.len()
    );

    let dir = tempfile::tempdir().unwrap();
    let mut tables = serde_json::Map::new();
    let listed = http(
        &url,
        &format!("SELECT name FROM system.tables WHERE database = '{db}' FORMAT TabSeparated"),
    );
    for table in String::from_utf8(listed).unwrap().lines() {
        let columns = http(
            &url,
            &format!("DESCRIBE TABLE {db}.{table} FORMAT TabSeparated"),
        );
        // LowCardinality as plain strings: its Native encoding changed across versions.
        let select: Vec<String> = String::from_utf8(columns)
            .unwrap()
            .lines()
            .map(|l| {
                let mut fields = l.split('\t');
                let (name, ty) = (fields.next().unwrap(), fields.next().unwrap());
                if ty.starts_with("LowCardinality") {
                    format!("toString({name}) AS {name}")
                } else {
                    name.to_owned()
                }
            })
            .collect();
        let rows = http(
            &url,
            &format!(
                "SELECT {} FROM {db}.{table} FORMAT Native",
                select.join(", ")
            ),
        );
        let path = dir.path().join(format!("{table}.native"));
        std::fs::write(&path, rows).unwrap();
        tables.insert(table.to_owned(), path.display().to_string().into());
    }
    let mut ddl = clickhouse_ddl(db, "26.9").unwrap();
    ddl.push(format!("CREATE TABLE IF NOT EXISTS {db}.schema_migrations (version UInt32, applied_ns UInt64) ENGINE = ReplacingMergeTree() ORDER BY version"));
    let manifest =
        serde_json::json!({ "database": db, "ddl": ddl, "tables": tables, "queries": queries });
    let manifest_path = dir.path().join("manifest.json");
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();

    let python = std::env::var("THREADLINE_TEST_PYTHON")
        .expect("THREADLINE_TEST_PYTHON names the Python with chdb (scripts/test sets it)");
    let out = std::process::Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/chdb_check.py"))
        .arg(&manifest_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" 0 differ"), "{stdout}");
    eprintln!("{}", stdout.trim());
}
