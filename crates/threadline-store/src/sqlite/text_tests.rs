//! Free-text search through the full-text index: words of names, prompts and
//! completions, newest first, per tenant; erasure takes the words out of the index's
//! pages; blocks stored before the index are still found.

use crate::StoreBackend as _;
use std::time::Duration;

use threadline_model::{AttrValue, Attribute, SpanEvent, TenantId};

use crate::sqlite::tests::{acme, span};
use crate::sqlite::{
    EmbeddedConfig, ErasureSubject, SqliteStore, TextIndexConfig, TraceQuery, DB_FILE_NAME,
};

/// A store whose indexer takes the newest blocks once they are `idle`.
fn store_indexing_after(dir: &std::path::Path, idle: Duration) -> SqliteStore {
    let config = EmbeddedConfig {
        text_index: TextIndexConfig { idle },
        ..EmbeddedConfig::default()
    };
    SqliteStore::open(dir, config).unwrap()
}

/// Waits for the background indexer to reach the newest block.
fn caught_up(store: &SqliteStore) {
    for _ in 0..500 {
        if store.index_backlog().unwrap() == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the full-text indexer did not catch up");
}

/// A span of trace `trace` whose prompt is `prompt` and whose completion (a GenAI
/// choice event) is `answer`.
fn said(
    trace: u8,
    start: u64,
    user: &str,
    prompt: &str,
    answer: &str,
) -> threadline_model::SpanRecord {
    let mut s = span(trace, 1, None, start, Some("gpt-4o"));
    s.detail.attributes = vec![Attribute::new(
        "gen_ai.prompt.0.content",
        AttrValue::String(prompt.into()),
    )];
    s.detail.events = vec![SpanEvent {
        time_unix_nano: start,
        name: "gen_ai.choice".into(),
        attributes: vec![Attribute::new("message", AttrValue::String(answer.into()))],
        dropped_attributes_count: 0,
    }];
    s.llm.as_mut().unwrap().user_id = Some(user.into());
    s
}

fn found(store: &SqliteStore, tenant: &TenantId, text: &str) -> Vec<u8> {
    let page = store
        .search(
            tenant,
            &TraceQuery {
                text: Some(text.into()),
                limit: 50,
                ..Default::default()
            },
        )
        .unwrap();
    page.traces.iter().map(|t| t.trace_id.0[0]).collect()
}

fn matching_documents(store: &SqliteStore, word: &str) -> i64 {
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    conn.query_row(
        "SELECT count(*) FROM text_groups WHERE text_groups MATCH ?1",
        [format!("\"{word}\"")],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn words_of_names_prompts_and_completions_are_found_newest_first_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_indexing_after(dir.path(), Duration::ZERO);
    let other = TenantId::new("other").unwrap();
    // One block per write: the index is consulted block by block.
    let spans = [
        said(1, 100, "u1", "Why is the sky blue?", "Rayleigh scattering."),
        said(2, 200, "u2", "Summarise the Q3 report", "Revenue grew 12%."),
        said(3, 300, "u1", "is the sky falling", "No."),
    ];
    for s in &spans {
        store
            .write_blocking(&acme(), std::slice::from_ref(s))
            .unwrap();
    }
    store
        .write_blocking(&other, &[said(9, 400, "u9", "the sky at night", "Stars.")])
        .unwrap();
    // Before the indexer has come (blocks read span by span) and after.
    assert_eq!(found(&store, &acme(), "sky"), [3, 1], "newest first");
    caught_up(&store);
    assert_eq!(matching_documents(&store, "sky"), 1, "one group");
    assert_eq!(found(&store, &acme(), "sky"), [3, 1], "newest first");
    assert_eq!(
        found(&store, &acme(), "SKY BLUE"),
        [1],
        "every word, any case"
    );
    assert_eq!(found(&store, &acme(), "rayleigh"), [1], "completion text");
    assert_eq!(
        found(&store, &acme(), "revenue gr"),
        [2],
        "the last word by prefix"
    );
    assert_eq!(found(&store, &acme(), "span-1"), [3, 2, 1], "span names");
    assert!(found(&store, &acme(), "gr revenue").is_empty());
    assert!(
        found(&store, &acme(), "stars").is_empty(),
        "another tenant's text"
    );
    assert_eq!(found(&store, &other, "sky"), [9]);
    assert!(found(&store, &acme(), "nonexistent").is_empty());
    // Pages of one trace each cover every match once.
    let mut cursor = None;
    let mut pages = Vec::new();
    loop {
        let page = store
            .search(
                &acme(),
                &TraceQuery {
                    text: Some("the".into()),
                    limit: 1,
                    cursor,
                    ..Default::default()
                },
            )
            .unwrap();
        pages.extend(page.traces.iter().map(|t| t.trace_id.0[0]));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(pages, [3, 2, 1]);
}

#[test]
fn erasure_takes_the_words_out_of_the_index_and_keeps_the_rest_of_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_indexing_after(dir.path(), Duration::ZERO);
    // Both traces share one block.
    store
        .write_blocking(
            &acme(),
            &[
                said(1, 100, "alice", "my name is Zyxwvutsrq", "Hello Zyxwvutsrq"),
                said(2, 200, "bob", "weather in Paris", "Sunny in Paris"),
            ],
        )
        .unwrap();
    assert_eq!(found(&store, &acme(), "zyxwvutsrq"), [1]);
    caught_up(&store);
    assert_eq!(matching_documents(&store, "zyxwvutsrq"), 1);
    let report = store
        .erase(&acme(), ErasureSubject::UserId("alice".into()), "test", 0)
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert!(report.erasure.is_some_and(|r| r.spans_deleted == 1));
    assert!(found(&store, &acme(), "zyxwvutsrq").is_empty());
    assert_eq!(matching_documents(&store, "zyxwvutsrq"), 0);
    assert_eq!(
        found(&store, &acme(), "paris"),
        [2],
        "the block's other trace"
    );
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    conn.execute_batch("INSERT INTO text_groups (text_groups) VALUES ('integrity-check')")
        .unwrap();
    drop(conn);
    drop(store);
    let bytes = std::fs::read(dir.path().join(DB_FILE_NAME)).unwrap();
    let needle = b"yxwvutsrq";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the erased word is still in the database file"
    );
}

#[test]
fn blocks_the_indexer_has_not_reached_are_read_span_by_span() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_indexing_after(dir.path(), Duration::from_secs(3600));
    store
        .write_blocking(&acme(), &[said(1, 100, "u1", "old question", "old answer")])
        .unwrap();
    assert_eq!(store.index_backlog().unwrap(), 1);
    assert_eq!(found(&store, &acme(), "question"), [1]);
    assert!(found(&store, &acme(), "missing").is_empty());
    assert_eq!(matching_documents(&store, "question"), 0);
}

#[test]
fn a_document_built_before_an_erasure_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_indexing_after(dir.path(), Duration::from_secs(3600));
    store
        .write_blocking(&acme(), &[said(1, 100, "alice", "secret plan", "ok")])
        .unwrap();
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    // Built, then an erasure commits: not written.
    let stale = write_now(&conn, Vec::new());
    store
        .erase(&acme(), ErasureSubject::UserId("alice".into()), "test", 0)
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert!(!crate::sqlite::text_indexer::apply(&conn, &stale).unwrap());
    assert_eq!(store.index_backlog().unwrap(), 1);
    // Built again from what is left: written.
    let fresh = write_now(&conn, Vec::new());
    assert!(crate::sqlite::text_indexer::apply(&conn, &fresh).unwrap());
    assert_eq!(store.index_backlog().unwrap(), 0);
    assert_eq!(matching_documents(&store, "secret"), 0);
}

/// What the indexer would hand the writer now, with `offered` handed over first.
fn write_now(
    conn: &rusqlite::Connection,
    offered: Vec<crate::sqlite::text_indexer::CommittedBlock>,
) -> crate::sqlite::text_indexer::TextWrite {
    let (feed, receiver) = crate::sqlite::text_indexer::feed();
    for block in offered {
        feed.offer(block);
    }
    crate::sqlite::text_indexer::build_now(conn, receiver)
        .unwrap()
        .unwrap()
}

/// The document the indexer would write now, with `offered` handed over first.
fn document_now(
    conn: &rusqlite::Connection,
    offered: Vec<crate::sqlite::text_indexer::CommittedBlock>,
) -> String {
    write_now(conn, offered).document().to_owned()
}

#[test]
fn a_block_handed_over_is_indexed_as_stored_unless_an_erasure_came_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_indexing_after(dir.path(), Duration::from_secs(3600));
    let spans = vec![
        said(1, 100, "alice", "secret plan", "ok"),
        said(2, 200, "bob", "weather today", "sunny"),
    ];
    store.write_blocking(&acme(), &spans).unwrap();
    let conn = rusqlite::Connection::open(store.path()).unwrap();
    let block_id: i64 = conn
        .query_row("SELECT max(id) FROM span_blocks", [], |r| r.get(0))
        .unwrap();
    let held = |spans: Vec<threadline_model::SpanRecord>, erasures| {
        crate::sqlite::text_indexer::CommittedBlock {
            block_id,
            erasures,
            texts: crate::sqlite::text_index::BlockTexts::of_spans(&spans),
        }
    };
    let stored = document_now(&conn, Vec::new());
    assert!(
        stored.contains("secret") && stored.contains("sunny"),
        "{stored}"
    );
    // The same spans handed over: the same document, not read back.
    assert_eq!(document_now(&conn, vec![held(spans.clone(), 0)]), stored);
    let other = vec![said(1, 100, "alice", "zebra", "ok")];
    assert!(document_now(&conn, vec![held(other.clone(), 0)]).contains("zebra"));
    // An erasure since the block was committed: the store's text, without alice's.
    store
        .erase(&acme(), ErasureSubject::UserId("alice".into()), "test", 0)
        .unwrap()
        .wait_blocking()
        .unwrap();
    let after = document_now(&conn, vec![held(other, 0)]);
    assert!(
        !after.contains("zebra") && !after.contains("secret"),
        "{after}"
    );
    assert!(after.contains("sunny"), "{after}");
    // A block handed over after that erasure counts it.
    let kept = vec![said(2, 200, "bob", "weather today", "sunny")];
    assert_eq!(document_now(&conn, vec![held(kept, 1)]), after);
}

#[test]
fn the_byte_screen_lets_every_match_through_and_only_matches() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let mut count = span(5, 1, None, 500, None);
    count
        .detail
        .attributes
        .push(Attribute::new("retries", AttrValue::Int(3)));
    let mut resource_tier = span(6, 1, None, 600, None);
    resource_tier.detail.attributes.clear();
    std::sync::Arc::make_mut(&mut resource_tier.origin)
        .resource_attributes
        .push(Attribute::new("tier", AttrValue::String("platinum".into())));
    // One block: the index finds both words in it, but no span holds both.
    let spans = [
        said(1, 100, "u1", "Quarterly numbers", "none"),
        said(2, 200, "u1", "earnings call", "none"),
        said(3, 300, "u1", "\u{212A}B article", "none"),
        said(4, 400, "u1", "QUARTERLY earnings", "none"),
        count,
        resource_tier,
    ];
    store.write_blocking(&acme(), &spans).unwrap();
    assert_eq!(found(&store, &acme(), "quarterly earn"), [4]);
    assert_eq!(
        found(&store, &acme(), "kb"),
        [3],
        "a KELVIN SIGN lowercases to an ASCII k"
    );
    let by_attr = |key: &str, value: &str| {
        store
            .search(
                &acme(),
                &TraceQuery {
                    attributes: vec![(key.into(), value.into())],
                    limit: 50,
                    ..Default::default()
                },
            )
            .unwrap()
            .traces
            .iter()
            .map(|t| t.trace_id.0[0])
            .collect::<Vec<u8>>()
    };
    assert_eq!(by_attr("retries", "3"), [5], "an integer attribute");
    assert_eq!(by_attr("tier", "platinum"), [6], "a resource attribute");
    assert_eq!(by_attr("tier", "free"), [5], "a span attribute");
}
