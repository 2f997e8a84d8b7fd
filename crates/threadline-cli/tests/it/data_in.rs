//! Data sent to the wrong port is answered with the right one: OTLP/HTTP posted to the
//! API port (a JSON error naming the OTLP ports), gRPC exports to either HTTP port (a
//! gRPC status a client prints), and the CLI pointed at the gRPC port.

use crate::harness::*;

const TRACE_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

fn port(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

#[test]
fn data_sent_to_the_wrong_port_is_told_the_right_one() {
    let server = TestServer::start();
    let (http_port, grpc_port) = (port(&server.otlp_http), port(&server.otlp_grpc));
    let body = proto(&llm_trace([3; 16], "app", "gpt-4o-mini", now_nanos()));

    // OTLP/HTTP on the API port, as SDKs configured for one-port tools send it.
    for path in ["/v1/traces", "/v1/logs"] {
        let resp = client()
            .post(format!("{}{path}", server.api))
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404);
        let err: serde_json::Value = resp.json().unwrap();
        let msg = err["error"].as_str().unwrap();
        assert!(
            msg.contains(&format!("port {http_port}"))
                && msg.contains(&format!("port {grpc_port}")),
            "{msg}"
        );
    }

    // A gRPC export to the API port or the OTLP/HTTP port.
    for base in [&server.api, &server.otlp_http] {
        let status = server
            .grpc_raw_at(base, TRACE_EXPORT, body.clone())
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");
        assert!(
            status
                .message()
                .contains(&format!("send OTLP/gRPC to port {grpc_port}")),
            "{status:?}"
        );
    }
    // Nothing of it was stored.
    let (_, traces) = server.get("/api/v1/traces", None);
    assert_eq!(traces["traces"], serde_json::json!([]));

    // The CLI given the gRPC port says what it may be.
    let (ok, _, err) = cli_at(&server.otlp_grpc, &["search"]);
    assert!(!ok);
    assert!(err.contains("is this the OTLP/gRPC port?"), "{err}");
}
