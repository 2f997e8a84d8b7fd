//! Column filters through the per-block values (`block_values`): every read that uses
//! them finds exactly what a scan of all spans finds, and an erasure takes the values
//! it removed out of them.

use crate::StoreBackend as _;
use std::collections::BTreeSet;

use threadline_model::{NodeId, NodeKind, SpanRecord, StatusCode};

use crate::sqlite::erase::ErasureSubject;
use crate::sqlite::tests::{acme, span};
use crate::sqlite::{EmbeddedConfig, ExemplarQuery, SqliteStore, TraceQuery};

/// The span of trace `t`: its columns vary with `t` so that blocks hold different
/// subsets of the values.
fn varied(t: u8) -> SpanRecord {
    let mut s = span(
        t,
        1,
        None,
        1_000 * u64::from(t % 7) + u64::from(t),
        Some("gpt-4o"),
    );
    s.service = ["gateway", "retriever", "llm"][usize::from(t % 3)].into();
    let llm = s.llm.as_mut().unwrap();
    llm.request_model = Some(["gpt-4o", "llama-3"][usize::from(t % 2)].into());
    llm.route =
        Some(["/v1/chat", "/v1/search", "/v1/embed", "/v1/rare"][usize::from(t % 4)].into());
    llm.adapter_id = t.is_multiple_of(5).then(|| "fin-qa".to_owned());
    llm.instance_id = Some(format!("inst-{}", t % 6));
    llm.ab_group = Some(["a", "b"][usize::from(t % 2)].into());
    if t.is_multiple_of(9) {
        s.detail.status.code = StatusCode::Error;
    }
    s
}

fn search_all(store: &SqliteStore, q: &TraceQuery) -> BTreeSet<u8> {
    let mut found = BTreeSet::new();
    let mut cursor = None;
    loop {
        let page = store
            .search(
                &acme(),
                &TraceQuery {
                    limit: 3,
                    cursor,
                    ..q.clone()
                },
            )
            .unwrap();
        for t in &page.traces {
            assert!(found.insert(t.trace_id.0[0]), "a trace on two pages");
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return found;
        }
    }
}

#[test]
fn column_filters_find_what_a_scan_finds_across_many_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let spans: Vec<SpanRecord> = (1..=60).map(varied).collect();
    // Three spans a block: twenty blocks whose zones overlap.
    for chunk in spans.chunks(3) {
        store.write_blocking(&acme(), chunk).unwrap();
    }
    let expect = |keep: &dyn Fn(&SpanRecord) -> bool| -> BTreeSet<u8> {
        spans
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.trace_id.0[0])
            .collect()
    };
    let llm = |s: &SpanRecord| s.llm.clone().unwrap();
    let cases: Vec<(TraceQuery, BTreeSet<u8>)> = vec![
        (
            TraceQuery {
                service: Some("RETR".into()),
                ..Default::default()
            },
            expect(&|s| s.service == "retriever"),
        ),
        (
            TraceQuery {
                route: Some("/v1/rare".into()),
                model: Some("llama".into()),
                ..Default::default()
            },
            expect(&|s| {
                llm(s).route.as_deref() == Some("/v1/rare")
                    && llm(s).request_model.as_deref() == Some("llama-3")
            }),
        ),
        (
            TraceQuery {
                adapter: Some("fin-qa".into()),
                errors_only: true,
                ..Default::default()
            },
            expect(&|s| llm(s).adapter_id.is_some() && s.detail.status.code == StatusCode::Error),
        ),
        (
            TraceQuery {
                ab_group: Some("b".into()),
                service: Some("llm".into()),
                start_from_unix_nano: Some(2_000),
                ..Default::default()
            },
            expect(&|s| {
                llm(s).ab_group.as_deref() == Some("b")
                    && s.service == "llm"
                    && s.start_time_unix_nano >= 2_000
            }),
        ),
        (
            TraceQuery {
                route: Some("/v1/none".into()),
                ..Default::default()
            },
            BTreeSet::new(),
        ),
    ];
    for (query, expected) in cases {
        assert!(!expected.is_empty() || query.route.as_deref() == Some("/v1/none"));
        assert_eq!(search_all(&store, &query), expected, "{query:?}");
    }

    let exemplars = store
        .exemplars(
            &acme(),
            &ExemplarQuery {
                filters: vec![
                    (threadline_analysis::Dimension::Instance, "inst-3".into()),
                    (threadline_analysis::Dimension::Route, "/v1/rare".into()),
                ],
                from_ns: 0,
                to_ns: i64::MAX,
                limit: 100,
                ..Default::default()
            },
        )
        .unwrap();
    let found: BTreeSet<u8> = exemplars.iter().map(|(id, _)| id.0[0]).collect();
    assert_eq!(
        found,
        expect(&|s| {
            llm(s).instance_id.as_deref() == Some("inst-3")
                && llm(s).route.as_deref() == Some("/v1/rare")
        })
    );
    let served = store
        .requests_served(&acme(), &["fin-qa".into()], &["inst-2".into()], 0)
        .unwrap();
    let by_adapter = expect(&|s| llm(s).adapter_id.is_some()).len() as u64;
    let by_instance = expect(&|s| llm(s).instance_id.as_deref() == Some("inst-2")).len() as u64;
    assert_eq!(
        served.by_node,
        [
            (NodeId::new(NodeKind::Adapter, "fin-qa"), by_adapter),
            (NodeId::new(NodeKind::Instance, "inst-2"), by_instance)
        ]
    );
    let operations = store.operations(&acme(), Some("llm")).unwrap();
    assert_eq!(operations.len(), 1, "one name and kind: {operations:?}");
}

#[test]
fn an_erasure_takes_the_values_it_removed_out_of_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let mut alice = span(1, 1, None, 100, Some("gpt-4o"));
    let llm = alice.llm.as_mut().unwrap();
    llm.user_id = Some("alice".into());
    llm.route = Some("/v1/users/alice-qwertyuiop/chat".into());
    llm.instance_id = Some("inst-1".into());
    let mut bob = span(2, 1, None, 200, Some("gpt-4o"));
    bob.llm.as_mut().unwrap().route = Some("/v1/chat".into());
    bob.llm.as_mut().unwrap().instance_id = Some("inst-1".into());
    // One block.
    store.write_blocking(&acme(), &[alice, bob]).unwrap();
    let route = |r: &str| {
        search_all(
            &store,
            &TraceQuery {
                route: Some(r.into()),
                ..Default::default()
            },
        )
    };
    assert_eq!(route("/v1/users/alice-qwertyuiop/chat"), [1].into());
    let report = store
        .erase(&acme(), ErasureSubject::UserId("alice".into()), "test", 0)
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert!(report.erasure.is_some_and(|r| r.spans_deleted == 1));
    assert!(route("/v1/users/alice-qwertyuiop/chat").is_empty());
    assert_eq!(route("/v1/chat"), [2].into(), "the block's other trace");
    let served = store
        .requests_served(&acme(), &[], &["inst-1".into()], 0)
        .unwrap();
    assert_eq!(
        served.by_node,
        [(NodeId::new(NodeKind::Instance, "inst-1"), 1)],
        "a value both traces had stays"
    );
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM block_values WHERE value LIKE '%qwertyuiop%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 0);
    // The writer deletes with `secure_delete` on, so the rows' bytes are zeroed. The
    // file still holds the route in the rollup series it named, which an erasure does
    // not rewrite yet (issue #16), so this test cannot grep the file for it.
}
