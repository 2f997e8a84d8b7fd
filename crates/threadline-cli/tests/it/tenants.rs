//! Tenant isolation: one tenant never reads another's spans through any endpoint.

use crate::harness::*;

const CONFIG: &str = r#"
[[tenants]]
id = "acme"
api_keys = ["acme-secret-key-0001"]

[[tenants]]
id = "globex"
api_keys = ["globex-secret-key-0002"]
"#;

#[test]
fn tenants_are_isolated_on_every_endpoint() {
    let server = TestServer::start_with_config(Some(CONFIG));
    let acme = "acme-secret-key-0001";
    let globex = "globex-secret-key-0002";
    let trace = [0x42; 16];
    let body = proto(&llm_trace(trace, "acme-gw", "gpt-4o", now_nanos()));
    // Ingest requires a key.
    assert_eq!(
        server
            .post_traces("application/x-protobuf", body.clone(), &[])
            .status(),
        401
    );
    assert_eq!(
        server
            .post_traces(
                "application/x-protobuf",
                body.clone(),
                &[("authorization", "Bearer wrong-key")]
            )
            .status(),
        401
    );
    let ok = server.post_traces(
        "application/x-protobuf",
        body,
        &[("authorization", &format!("Bearer {acme}"))],
    );
    assert_eq!(ok.status(), 200);

    let id = hex(&trace);
    assert_eq!(
        server.get(&format!("/api/v1/traces/{id}"), Some(acme)).0,
        200
    );
    // The other tenant sees nothing, whichever way it asks.
    let (status, body) = server.get(&format!("/api/v1/traces/{id}"), Some(globex));
    assert_eq!(status, 404, "{body}");
    for query in [
        "",
        "?service=acme-gw",
        "?model=gpt-4o",
        "?adapter=fin-lora@7",
        "?attr.service.name=acme-gw",
        "?route=/v1/chat/completions",
    ] {
        let (status, page) = server.get(&format!("/api/v1/traces{query}"), Some(globex));
        assert_eq!(status, 200);
        assert_eq!(
            page["traces"].as_array().unwrap().len(),
            0,
            "globex saw acme via {query}: {page}"
        );
        let (_, mine) = server.get(&format!("/api/v1/traces{query}"), Some(acme));
        assert_eq!(
            mine["traces"].as_array().unwrap().len(),
            1,
            "acme lost its trace via {query}"
        );
    }
    let (_, services) = server.get("/api/v1/services", Some(globex));
    assert_eq!(services["services"].as_array().unwrap().len(), 0);
    // Queries need a valid key too.
    for path in [
        "/api/v1/traces",
        &format!("/api/v1/traces/{id}"),
        "/api/v1/services",
    ] {
        let (status, body) = server.get(path, None);
        assert_eq!(status, 401, "{path}");
        assert!(
            body["error"].as_str().unwrap().contains("API key"),
            "{body}"
        );
        assert_eq!(server.get(path, Some("nope-nope-nope-nope")).0, 401);
    }
    // Through the CLI, with the key from the environment variable name too.
    let (ok, out, err) = server.cli(&["search", "--api-key", globex]);
    assert!(ok, "{err}");
    assert!(out.contains("0 trace(s)"), "{out}");
}

#[test]
fn non_loopback_without_keys_is_refused() {
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--http",
            "0.0.0.0:0",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-unauthenticated"), "{err}");
}
