//! OTLP/gRPC ingest with tonic's client: gzip, partial success, auth errors.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::Span;
use tonic::codec::CompressionEncoding;

use crate::harness::*;
use crate::scratch::*;

#[test]
fn grpc_export_with_gzip_and_partial_success() {
    let server = TestServer::start();
    runtime().block_on(async {
        let mut client = TraceServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap()
            .send_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Gzip);
        let mut request = llm_trace([0x77; 16], "grpc-app", "llama", now_nanos());
        request.resource_spans[0].scope_spans[0].spans.push(Span {
            trace_id: vec![0x77; 16],
            span_id: vec![0; 8],
            name: "bad".into(),
            ..Default::default()
        });
        let response = client.export(request).await.unwrap().into_inner();
        let partial = response.partial_success.expect("partial success");
        assert_eq!(partial.rejected_spans, 1);
        assert!(
            partial
                .error_message
                .contains("span id must not be all zeros"),
            "{}",
            partial.error_message
        );
    });
    let (status, trace) = server.get(&format!("/api/v1/traces/{}", hex(&[0x77; 16])), None);
    assert_eq!(status, 200);
    assert_eq!(trace["span_count"], 2);
    assert_eq!(
        trace["roots"][0]["children"][0]["llm"]["request_model"],
        "llama"
    );
}

#[test]
fn grpc_requires_a_valid_key_when_tenants_are_configured() {
    let server = TestServer::start_with_config(Some(
        "[[tenants]]\nid = \"acme\"\napi_keys = [\"acme-secret-key-0001\"]\n",
    ));
    runtime().block_on(async {
        let mut client = TraceServiceClient::connect(server.otlp_grpc.clone())
            .await
            .unwrap();
        let err = client
            .export(llm_trace([0x78; 16], "x", "m", now_nanos()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        let mut req = tonic::Request::new(llm_trace([0x78; 16], "x", "m", now_nanos()));
        req.metadata_mut().insert(
            "authorization",
            "Bearer acme-secret-key-0001".parse().unwrap(),
        );
        client.export(req).await.unwrap();
    });
    assert_eq!(
        server
            .get(
                &format!("/api/v1/traces/{}", hex(&[0x78; 16])),
                Some("acme-secret-key-0001")
            )
            .0,
        200
    );
}

#[test]
fn grpc_full_queue_is_resource_exhausted_with_retry_info() {
    let mut stalled = StalledStore::start("[server]\nmax_queued_batches = 1\n");
    let server = &stalled.server;
    let grpc = server.otlp_grpc.clone();
    let codes = runtime().block_on(async {
        let client = TraceServiceClient::connect(grpc).await.unwrap();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..6u8 {
            let mut client = client.clone();
            calls.spawn(async move {
                client
                    .export(llm_trace([0x90 + i; 16], "grpc-app", "m", now_nanos()))
                    .await
                    .map(|_| ())
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        stalled.release();
        calls.join_all().await
    });
    let exhausted: Vec<&tonic::Status> = codes
        .iter()
        .filter_map(|r| r.as_ref().err())
        .filter(|s| s.code() == tonic::Code::ResourceExhausted)
        .collect();
    assert!(!exhausted.is_empty(), "{codes:?}");
    for status in exhausted {
        assert_eq!(status.metadata().get("retry-after").unwrap(), "1");
        assert!(
            !status.details().is_empty(),
            "RetryInfo makes the error retryable for OTLP clients"
        );
    }
    assert!(codes.iter().any(|r| r.is_ok()), "{codes:?}");
}

#[test]
fn grpc_malformed_protobuf_is_invalid_argument() {
    let server = TestServer::start();
    // A gRPC frame (uncompressed, 4 bytes) whose protobuf is invalid, sent as raw HTTP/2,
    // to the trace service and to the logs service.
    for (service, message) in [
        ("trace.v1.TraceService", "ExportTraceServiceRequest"),
        ("logs.v1.LogsService", "ExportLogsServiceRequest"),
    ] {
        let status = server
            .grpc_raw(
                &format!("/opentelemetry.proto.collector.{service}/Export"),
                vec![0x0a, 0xff, 0xff, 0xff, 0x0f],
            )
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(message), "{status:?}");
    }
}
