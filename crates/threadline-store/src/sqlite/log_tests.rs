//! Log records: stored durably with their span ids, read per trace and span, searched
//! newest first by text and filters, page by page, and erased with their trace or
//! their subject — words included.

use crate::StoreBackend as _;
use std::sync::Arc;

use threadline_model::{
    AttrValue, Attribute, LogDetail, LogRecord, SpanId, SpanOrigin, TenantId, TraceId,
};

use crate::sqlite::tests::{acme, span};
use crate::sqlite::{EmbeddedConfig, ErasureSubject, LogQuery, SqliteStore};

fn log(
    trace: Option<u8>,
    at: u64,
    severity: i32,
    event: &str,
    body: &str,
    user: Option<&str>,
) -> LogRecord {
    let mut attributes = vec![Attribute::new(
        "gen_ai.system",
        AttrValue::String("openai".into()),
    )];
    if let Some(u) = user {
        attributes.push(Attribute::new("user.id", AttrValue::String(u.into())));
    }
    LogRecord {
        time_unix_nano: at,
        trace_id: trace.map(|t| TraceId([t; 16])),
        span_id: trace.map(|_| SpanId([1; 8])),
        service: "chat".into(),
        detail: LogDetail {
            severity_number: severity,
            event_name: event.into(),
            body: AttrValue::KvList(vec![Attribute::new(
                "content",
                AttrValue::String(body.into()),
            )]),
            attributes,
            ..LogDetail::default()
        },
        origin: Arc::new(SpanOrigin::default()),
    }
}

fn write(store: &SqliteStore, tenant: &TenantId, records: &[LogRecord]) {
    let prepared = store.prepare_logs(tenant, records).unwrap();
    store
        .submit_logs(prepared)
        .unwrap()
        .wait_blocking()
        .unwrap();
}

fn search(store: &SqliteStore, q: LogQuery) -> Vec<u64> {
    let page = store
        .search_logs(&acme(), &LogQuery { limit: 50, ..q })
        .unwrap();
    page.logs.iter().map(|l| l.record.time_unix_nano).collect()
}

#[test]
fn logs_are_read_by_span_and_searched_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    write(
        &store,
        &acme(),
        &[
            log(
                Some(1),
                10,
                9,
                "gen_ai.user.message",
                "Why was I charged twice?",
                None,
            ),
            log(
                Some(1),
                20,
                9,
                "gen_ai.choice",
                "You were charged once, refunded once.",
                None,
            ),
            log(None, 30, 17, "", "payment gateway timeout", None),
        ],
    );
    write(
        &store,
        &TenantId::new("other").unwrap(),
        &[log(Some(1), 40, 9, "", "charged elsewhere", None)],
    );
    let of_span = store
        .logs_of(&acme(), TraceId([1; 16]), Some(SpanId([1; 8])))
        .unwrap();
    assert_eq!(of_span.len(), 2);
    assert_eq!(of_span[0].detail.event_name, "gen_ai.user.message");
    assert!(store
        .logs_of(&acme(), TraceId([1; 16]), Some(SpanId([2; 8])))
        .unwrap()
        .is_empty());
    let text = |t: &str| {
        search(
            &store,
            LogQuery {
                text: Some(t.into()),
                ..Default::default()
            },
        )
    };
    assert_eq!(text("charged"), [20, 10], "newest first, this tenant only");
    assert_eq!(text("CHARGED tw"), [10]);
    assert_eq!(text("timeout"), [30]);
    assert!(text("missing").is_empty());
    assert_eq!(
        search(
            &store,
            LogQuery {
                min_severity: Some(17),
                ..Default::default()
            }
        ),
        [30]
    );
    assert_eq!(
        search(
            &store,
            LogQuery {
                event_prefix: Some("gen_ai.".into()),
                ..Default::default()
            }
        ),
        [20, 10]
    );
    assert_eq!(
        search(
            &store,
            LogQuery {
                trace_id: Some(TraceId([1; 16])),
                ..Default::default()
            }
        ),
        [20, 10]
    );
    // Pages of one.
    let mut cursor = None;
    let mut seen = Vec::new();
    loop {
        let page = store
            .search_logs(
                &acme(),
                &LogQuery {
                    limit: 1,
                    cursor,
                    ..Default::default()
                },
            )
            .unwrap();
        seen.extend(page.logs.iter().map(|l| l.record.time_unix_nano));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, [30, 20, 10]);
}

#[test]
fn erasure_takes_logs_of_the_trace_and_logs_naming_the_subject() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let mut root = span(7, 1, None, 100, None);
    root.llm = Some(threadline_model::LlmView {
        user_id: Some("alice".into()),
        ..Default::default()
    });
    store.write_blocking(&acme(), &[root]).unwrap();
    write(
        &store,
        &acme(),
        &[
            log(
                Some(7),
                10,
                9,
                "gen_ai.user.message",
                "my iban is Qwxyzvutsr",
                None,
            ),
            log(
                None,
                20,
                9,
                "",
                "alice logged in from Kprstuvwxy",
                Some("alice"),
            ),
            log(None, 30, 9, "", "bob logged in", Some("bob")),
        ],
    );
    let report = store
        .erase(&acme(), ErasureSubject::UserId("alice".into()), "test", 0)
        .unwrap()
        .wait_blocking()
        .unwrap()
        .erasure
        .unwrap();
    assert_eq!(report.logs_deleted, 2);
    assert_eq!(search(&store, LogQuery::default()), [30]);
    assert!(store
        .logs_of(&acme(), TraceId([7; 16]), None)
        .unwrap()
        .is_empty());
    for word in ["qwxyzvutsr", "kprstuvwxy"] {
        assert!(search(
            &store,
            LogQuery {
                text: Some(word.into()),
                ..Default::default()
            }
        )
        .is_empty());
    }
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let documents: i64 = conn
        .query_row(
            "SELECT count(*) FROM log_text WHERE log_text MATCH 'qwxyzvutsr OR kprstuvwxy'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(documents, 0);
    conn.execute_batch("INSERT INTO log_text (log_text) VALUES ('integrity-check')")
        .unwrap();
    drop(conn);
    drop(store);
    let bytes = std::fs::read(dir.path().join(crate::sqlite::DB_FILE_NAME)).unwrap();
    for needle in [&b"wxyzvutsr"[..], b"prstuvwxy"] {
        assert!(!bytes.windows(needle.len()).any(|w| w == needle));
    }
}
