//! Records a sender got wrong: times from a skewed clock, strings that are not UTF-8,
//! gRPC messages over the limit.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use super::PROTOBUF;
use crate::harness::*;

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

/// A gRPC export over the limit, as sent or once inflated, is INVALID_ARGUMENT (which
/// exporters do not retry), not OUT_OF_RANGE or RESOURCE_EXHAUSTED (which they do,
/// forever); two authorization entries are refused.
#[test]
fn an_oversized_grpc_export_is_not_retryable() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use tonic::codec::CompressionEncoding;

    let server = TestServer::start_with_config(Some("[server]\nmax_body_bytes = 100000\n"));
    let mut big = llm_trace([6; 16], "gw", "gpt-4o", now_nanos());
    big.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .push(kv("padding", &"x".repeat(300_000)));
    runtime().block_on(async {
        let mut plain = TraceServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap()
            .max_encoding_message_size(usize::MAX);
        let err = plain.export(big.clone()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        assert!(err.message().contains("100000"), "{err}");
        // Small on the wire, over the limit inflated.
        let mut gzip = TraceServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap()
            .send_compressed(CompressionEncoding::Gzip);
        let err = gzip.export(big).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        let mut twice = tonic::Request::new(llm_trace([6; 16], "gw", "m", now_nanos()));
        for key in [
            "Bearer a-key-0123456789abcdef",
            "Bearer b-key-0123456789abcdef",
        ] {
            twice
                .metadata_mut()
                .append("authorization", key.parse().unwrap());
        }
        let err = plain.export(twice).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
        // The server still takes a good export.
        plain
            .export(llm_trace([6; 16], "gw", "gpt-4o", now_nanos()))
            .await
            .unwrap();
    });
}

/// One span whose name is not UTF-8 is refused alone, through partial success, on both
/// transports; the rest of its batch is stored. A cost is never `-0.0`.
#[test]
fn a_span_with_invalid_utf8_is_refused_alone_and_costs_are_never_negative_zero() {
    let server = TestServer::start();
    let broken = |trace: u8| {
        let mut request = llm_trace([trace; 16], "gw", "gpt-4o", now_nanos());
        let spans = &mut request.resource_spans[0].scope_spans[0].spans;
        spans[1].name = "BROKEN-NAME".into();
        for span in spans.iter_mut() {
            span.attributes.push(kv("session.id", "sess-utf8"));
        }
        let mut bytes = proto(&request);
        let at = bytes.windows(6).position(|w| w == b"BROKEN").unwrap();
        bytes[at] = 0xc3; // a UTF-8 lead byte followed by ASCII
        bytes
    };
    let resp = server.post_traces(PROTOBUF, broken(0x31), &[]);
    assert_eq!(resp.status(), 200);
    let body = ExportTraceServiceResponse::decode(resp.bytes().unwrap()).unwrap();
    let partial = body.partial_success.expect("partial success");
    assert_eq!(partial.rejected_spans, 1, "{}", partial.error_message);
    assert!(
        partial.error_message.contains("span 1 of scope 0"),
        "{}",
        partial.error_message
    );
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[0x31; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);

    // gRPC: the same bytes as the message.
    let response = server
        .grpc_raw(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            broken(0x32),
        )
        .unwrap();
    let partial = ExportTraceServiceResponse::decode(response.as_slice())
        .unwrap()
        .partial_success
        .expect("partial success");
    assert_eq!(partial.rejected_spans, 1);
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[0x32; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 1);

    // The session's kept spans carry no tokens: its cost is 0.0, not -0.0.
    let resp = client()
        .get(format!("{}/api/v1/sessions/sess-utf8", server.api))
        .send()
        .unwrap();
    let text = resp.text().unwrap();
    assert!(text.contains("\"cost_usd\":0.0"), "{text}");
    assert!(!text.contains("-0.0"), "{text}");
}
