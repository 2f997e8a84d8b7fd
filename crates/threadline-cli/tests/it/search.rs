//! Trace search as users type it: filters on different spans of one trace find it, the
//! CLI's `--since` and the API's `since=` (the UI's presets) agree, a hyphenated id is a
//! phrase, and results come newest trace start first.

use serde_json::Value;

use crate::harness::*;

const HOUR: u64 = 3_600_000_000_000;

/// A trace whose LLM span's prompt is `prompt` (the route is on the gateway root).
fn request(trace: u8, start: u64, prompt: &str) -> Vec<u8> {
    let mut req = llm_trace([trace; 16], "gateway", "gpt-4o-mini", start);
    req.resource_spans[0].scope_spans[0].spans[1]
        .attributes
        .push(kv("gen_ai.prompt", prompt));
    proto(&req)
}

fn found(page: &Value) -> Vec<String> {
    page["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["trace_id"].as_str().unwrap()[..2].to_owned())
        .collect()
}

#[test]
fn filters_combine_per_trace_and_since_means_the_same_everywhere() {
    let server = TestServer::start();
    let now = now_nanos();
    for (trace, start, prompt) in [
        (1u8, now - 2 * HOUR, "refund for user-40 please"),
        (2, now - 20 * 60_000_000_000, "refund for user-40 please"),
        (3, now - 10 * 60_000_000_000, "user 7 wants 40 refunds"),
    ] {
        let resp = server.post_traces("application/x-protobuf", request(trace, start, prompt), &[]);
        assert_eq!(resp.status(), 200);
    }
    // Text on the LLM span, route on the root: one trace, not one span.
    let (status, page) = server.get(
        "/api/v1/traces?q=refund&route=/v1/chat/completions&since=1h",
        None,
    );
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        found(&page),
        ["03", "02"],
        "newest start first, within the hour"
    );
    // The CLI's --since is the API's since=.
    let (ok, out, err) = server.cli(&[
        "search",
        "--text",
        "refund",
        "--route",
        "/v1/chat/completions",
        "--since",
        "1h",
        "--json",
    ]);
    assert!(ok, "{err}");
    let cli: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(found(&cli), ["03", "02"]);
    // A hyphenated id is a phrase: trace 3 has both words, not one after the other.
    let (_, page) = server.get("/api/v1/traces?q=user-40", None);
    assert_eq!(found(&page), ["02", "01"]);
    let (_, page) = server.get("/api/v1/traces?q=user%2040", None);
    assert_eq!(found(&page), ["03", "02", "01"], "unquoted words anywhere");
    let (status, page) = server.get("/api/v1/traces?since=soon", None);
    assert_eq!(status, 400);
    assert!(page["error"].as_str().unwrap().contains("since"), "{page}");
}
