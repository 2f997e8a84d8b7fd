//! What a careless client or an attacker on loopback must not be able to do: blind the
//! detector with a skewed clock, write from another site, hold connections or memory,
//! read other tenants' numbers, or start a second writer on the same data.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use crate::harness::*;

const PROTOBUF: &str = "application/x-protobuf";

/// A span dated a year ahead (a sender whose clock is wrong) is refused by span, with
/// a message naming the time; its batch's other spans are stored. A time past what
/// can be stored is refused the same way, and no message shows negative nanoseconds.
#[test]
fn spans_from_a_skewed_clock_are_refused_by_span() {
    let server = TestServer::start_with_config(Some("[limits]\nmax_future_skew = \"5m\"\n"));
    let now = now_nanos();
    let year = 365 * 86_400 * 1_000_000_000u64;
    let mut request = llm_trace([7; 16], "gw", "gpt-4o", now);
    let spans = &mut request.resource_spans[0].scope_spans[0].spans;
    spans[1].start_time_unix_nano = now + year;
    spans[1].end_time_unix_nano = now + year + 1;
    let mut past_i64 = spans[0].clone();
    past_i64.span_id = vec![9; 8];
    past_i64.end_time_unix_nano = u64::MAX;
    spans.push(past_i64);
    let resp = server.post_traces(PROTOBUF, proto(&request), &[]);
    assert_eq!(resp.status(), 200);
    let body = ExportTraceServiceResponse::decode(resp.bytes().unwrap()).unwrap();
    let partial = body.partial_success.expect("partial success");
    assert_eq!(partial.rejected_spans, 2);
    let msg = partial.error_message;
    assert!(msg.contains("ahead of the server's clock"), "{msg}");
    assert!(msg.contains("accepted skew of 5m"), "{msg}");
    assert!(msg.contains("latest storable time"), "{msg}");
    assert!(!msg.contains(" -") && !msg.contains("(-"), "{msg}");
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[7; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);

    // Query times past i64 ns are refused by name, not wrapped into negative numbers.
    let (status, body) = server.get(
        "/api/v1/metrics?metric=p99_latency&from=0&to=18446744073709551615",
        None,
    );
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("latest time"), "{error}");
    let (status, body) = server.get(
        "/api/v1/metrics?metric=p99_latency&from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z",
        None,
    );
    assert_eq!(status, 400);
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("from (2026-12-02T00:00:00") && !error.contains("ns)"),
        "{error}"
    );
}
