//! Service and model filters: case-insensitive, by prefix, and the model filter
//! matching the responding model as well as the requested one.

use crate::StoreBackend as _;
use threadline_model::TraceId;

use crate::sqlite::tests::{acme, span};
use crate::sqlite::{EmbeddedConfig, SqliteStore, TraceQuery};

#[test]
fn service_and_model_filters_match_any_case_by_prefix_and_the_response_model() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path(), EmbeddedConfig::default()).unwrap();
    let mut a = span(1, 1, None, 100, Some("gpt-4o"));
    a.service = "Retriever-EU".into();
    a.llm.as_mut().unwrap().response_model = Some("gpt-4o-2024-08-06".into());
    let b = span(2, 1, None, 200, Some("claude-3-haiku"));
    let mut c = span(3, 1, None, 300, Some("x"));
    let llm = c.llm.as_mut().unwrap();
    llm.request_model = None;
    llm.response_model = Some("mistral-large".into());
    for s in [&a, &b, &c] {
        store
            .write_blocking(&acme(), std::slice::from_ref(s))
            .unwrap();
    }
    let found = |q: TraceQuery| -> Vec<u8> {
        let page = store
            .search(&acme(), &TraceQuery { limit: 10, ..q })
            .unwrap();
        let mut ids: Vec<u8> = page.traces.iter().map(|t| t.trace_id.0[0]).collect();
        ids.sort_unstable();
        ids
    };
    let service = |s: &str| {
        found(TraceQuery {
            service: Some(s.into()),
            ..Default::default()
        })
    };
    let model = |m: &str| {
        found(TraceQuery {
            model: Some(m.into()),
            ..Default::default()
        })
    };
    assert_eq!(service("retr"), [1]);
    assert_eq!(service("RETRIEVER-eu"), [1]);
    assert_eq!(service("gate"), [2, 3]);
    assert!(service("eu").is_empty(), "a prefix, not a substring");
    assert_eq!(model("GPT-4O"), [1]);
    assert_eq!(model("gpt-4o-2024"), [1], "the responding model");
    assert_eq!(model("claude"), [2]);
    assert_eq!(model("mistral"), [3]);
    assert!(model("llama").is_empty());
    // Exact matching, for clients that send a name picked from the stored ones.
    let exact = |s: &str| {
        found(TraceQuery {
            service: Some(s.into()),
            names: crate::NameMatch::Exact,
            ..Default::default()
        })
    };
    assert!(exact("retriever").is_empty());
    assert_eq!(exact("Retriever-EU"), [1]);
    // Combined with another indexed filter, and the services list from the same table.
    assert_eq!(
        found(TraceQuery {
            service: Some("retriever".into()),
            model: Some("gpt".into()),
            ..Default::default()
        }),
        [1]
    );
    let names: Vec<String> = store
        .services(&acme())
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["Retriever-EU", "gateway"]);
    assert_eq!(store.get_trace(&acme(), TraceId([1; 16])).unwrap(), vec![a]);
}
